"""The outbox sweep: recompute the dirty GPU-hours (`gpuquota.outbox` says what marks
them and when they are due), many GPUs of one hour per round of queries.

For each hour's group of marks, in one transaction: take the free per-GPU-hour locks in
one statement (another worker has the others: their marks stay; it may be on another hour
of the same GPUs, so two workers share even a back-fill of few GPUs), drop the marks
still there (only if their generation is unchanged: a mark bumped since this sweep read it
leaves its row for the next sweep), evaluate health for the GPUs whose hour holds health
work (under their per-GPU locks: health intervals span hours), then bring the rollup rows
of all of them up to date from inputs loaded in a fixed number of queries, writing only
what changed (`rollup_rows`). The marks are dropped before any input is read: a change
marking before the drop holds its mark's row lock until it commits (the drop waits, the
reads see it), one marking after it waits for this transaction and inserts a new mark
(`gpuquota.outbox.services`).
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from gpuquota.inventory.models import Gpu
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.health import gpu_health_evaluate, gpus_with_health_work
from gpuquota.usage.services import (
    gpu_hours_replace,
    gpu_hours_try_lock,
    gpus_lock,
    raw_data_horizon,
)

logger = logging.getLogger(__name__)

#: GPUs of one hour recomputed in one transaction and one round of queries.
GPUS_PER_ROUND = 400


@dataclass(frozen=True)
class Mark:
    id: int
    gpu_id: int  # physical
    generation: int


def _due_marks(*, limit: int, due_by: datetime | None) -> dict[datetime, list[Mark]]:
    marks = DirtyGpuHour.objects.order_by("due_at", "id")
    if due_by is not None:
        marks = marks.filter(due_at__lte=due_by)
    rows = list(marks.values_list("id", "gpu_id", "hour", "generation")[:limit])
    parents = dict(Gpu.objects.filter(id__in={r[1] for r in rows}, parent__isnull=False)
                   .values_list("id", "parent_id"))
    by_hour: dict[datetime, list[Mark]] = defaultdict(list)
    for dirty_id, gpu_id, hour, generation in rows:
        by_hour[hour].append(Mark(dirty_id, parents.get(gpu_id, gpu_id), generation))
    return by_hour


def _marks_take(marks: list[Mark]) -> list[Mark]:
    """The marks still in the outbox (another worker may have done some since we read
    it), each deleted if no new mark bumped its generation. Must come before the round
    reads any input (see the module docstring)."""
    present = set(DirtyGpuHour.objects.filter(id__in=[m.id for m in marks])
                  .values_list("id", flat=True))
    marks = [m for m in marks if m.id in present]
    if marks:
        # one row-value list, not an ORM OR of hundreds of terms (costly to build)
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {DirtyGpuHour._meta.db_table} WHERE (id, generation) IN "
                f"(VALUES {', '.join(['(%s, %s)'] * len(marks))})",
                [value for m in marks for value in (m.id, m.generation)])
    return marks


def health_step(*, gpu_ids: list[int], hour: datetime) -> int:
    """Health evaluation of the sweep: only the GPUs the set-based pre-filter finds with
    openers or an open failed interval in the hour go through the per-GPU rule, one
    worker at a time per GPU."""
    with_work = sorted(gpus_with_health_work(gpu_ids=gpu_ids, hour=hour))
    gpus_lock(gpu_ids=with_work)
    return sum(gpu_health_evaluate(gpu_id=gpu_id, hour=hour) for gpu_id in with_work)


def _round_sweep(*, hour: datetime, marks: list[Mark]) -> int:
    with transaction.atomic():
        locked = gpu_hours_try_lock(gpu_ids=[m.gpu_id for m in marks], hour=hour)
        marks = _marks_take([m for m in marks if m.gpu_id in locked])
        gpu_ids = sorted({m.gpu_id for m in marks})
        if not gpu_ids:
            return 0
        if hour < raw_data_horizon():
            # Raw data of this hour is expired: its rollups are all that is left; keep them.
            logger.warning("not recomputing gpus %s hour %s: raw data expired", gpu_ids, hour)
            return len(marks)
        health_step(gpu_ids=gpu_ids, hour=hour)
        gpu_hours_replace(gpu_ids=gpu_ids, hour=hour)
        return len(marks)


def dirty_hours_process(*, limit: int = 2000, due_by: datetime | None = None) -> int:
    """Recompute up to `limit` dirty GPU-hours, earliest due first: those due by `due_by`
    (the beat sweep passes now), or every mark (None: a catch-up). Idempotent; a GPU
    another worker is recomputing is left for the next sweep. Returns marks done."""
    done = 0
    for hour, marks in sorted(_due_marks(limit=limit, due_by=due_by).items()):
        for offset in range(0, len(marks), GPUS_PER_ROUND):
            done += _round_sweep(hour=hour, marks=marks[offset : offset + GPUS_PER_ROUND])
    return done
