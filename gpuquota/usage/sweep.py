"""The outbox sweep: recompute the dirty GPU-hours (`gpuquota.outbox` says what marks
them and when they are due), many GPUs of one hour, or of a run of consecutive hours of
the same GPUs (a back-filled day), per round of queries.

For each round's marks (at most `GPUS_PER_ROUND` GPUs, `GPU_HOURS_PER_ROUND` GPU-hours), in
one transaction: take the free per-GPU-hour locks, one
statement an hour (another worker has the others: their marks stay; it may be on another hour
of the same GPUs, so two workers share even a back-fill of few GPUs), drop the marks
still there (only if their generation is unchanged: a mark bumped since this sweep read it
leaves its row for the next sweep), evaluate health for the GPUs whose hour holds health
work (under their per-GPU locks: health intervals span hours), then bring the rollup rows
of all of them up to date from inputs loaded in a fixed number of queries (once for a
run of hours of the same GPUs, each hour computed from it), writing only
what changed (`rollup_rows`), the fleet's rows last (`rollup_fleet`). The marks are
dropped before any input is read: a change marking before the drop holds its mark's row
lock until it commits (the drop waits, the reads see it), one marking after it waits for
this transaction and inserts a new mark (`gpuquota.outbox.services`).
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction

from gpuquota.ingest.health import gpu_health_evaluate, gpus_with_health_work
from gpuquota.ingest.partitions import raw_data_horizon
from gpuquota.inventory.models import Gpu
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.rollup_fleet import FleetChanges, fleet_changes_apply
from gpuquota.usage.services import (
    gpu_hours_replace,
    gpu_hours_try_lock,
    gpus_lock,
)

logger = logging.getLogger(__name__)

#: GPUs of one hour recomputed in one transaction and one round of queries.
GPUS_PER_ROUND = 400
#: GPU-hours recomputed in one transaction (consecutive hours of the same GPUs share one):
#: as many locks held as a round of one hour, whatever the span.
GPU_HOURS_PER_ROUND = GPUS_PER_ROUND
HOUR = timedelta(hours=1)


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


def _spans(gpus_by_hour: dict[datetime, list[int]]) -> list[tuple[datetime, int, list[int]]]:
    """(first hour, hours, GPUs): runs of consecutive hours of the same GPUs, in order."""
    spans: list[tuple[datetime, int, list[int]]] = []
    for hour, gpu_ids in sorted(gpus_by_hour.items()):
        if spans and spans[-1][2] == gpu_ids and spans[-1][0] + spans[-1][1] * HOUR == hour:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1, gpu_ids)
        else:
            spans.append((hour, 1, gpu_ids))
    return spans


def _round_sweep(*, marks_by_hour: dict[datetime, list[Mark]]) -> int:
    """One transaction over some hours' marks: per-GPU-hour locks, marks taken, health
    per hour in order, then the rows of each run of hours of the same GPUs from one
    load of their inputs."""
    with transaction.atomic():
        locked = {hour: gpu_hours_try_lock(gpu_ids=[m.gpu_id for m in marks], hour=hour)
                  for hour, marks in marks_by_hour.items()}
        taken = _marks_take([m for hour, marks in marks_by_hour.items() for m in marks
                             if m.gpu_id in locked[hour]])
        taken_ids = {m.id for m in taken}
        gpus_by_hour = {}
        for hour, marks in sorted(marks_by_hour.items()):
            gpu_ids = sorted({m.gpu_id for m in marks if m.id in taken_ids})
            if not gpu_ids:
                continue
            if hour < raw_data_horizon():
                # Raw data of this hour is expired: its rollups are all that is left; keep them.
                logger.warning("not recomputing gpus %s hour %s: raw data expired",
                               gpu_ids, hour)
                continue
            health_step(gpu_ids=gpu_ids, hour=hour)
            gpus_by_hour[hour] = gpu_ids
        fleet = FleetChanges()
        for hour, hours, gpu_ids in _spans(gpus_by_hour):
            gpu_hours_replace(gpu_ids=gpu_ids, hour=hour, hours=hours, fleet=fleet)
        fleet_changes_apply(fleet)  # the rows every worker changes: locked last
        return len(taken)


def _rounds(by_hour: dict[datetime, list[Mark]]) -> list[dict[datetime, list[Mark]]]:
    """The marks in rounds of at most `GPUS_PER_ROUND` GPUs and `GPU_HOURS_PER_ROUND`
    GPU-hours: consecutive hours of the same GPUs (a back-filled day) share a round."""
    rounds: list[dict[datetime, list[Mark]]] = []
    previous: tuple[datetime, frozenset] | None = None
    for hour, marks in sorted(by_hour.items()):
        for offset in range(0, len(marks), GPUS_PER_ROUND):
            chunk = marks[offset : offset + GPUS_PER_ROUND]
            gpus = frozenset(m.gpu_id for m in chunk)
            size = sum(map(len, rounds[-1].values())) if rounds else 0
            if (len(marks) <= GPUS_PER_ROUND and previous == (hour - HOUR, gpus)
                    and size + len(chunk) <= GPU_HOURS_PER_ROUND):
                rounds[-1][hour] = chunk
            else:
                rounds.append({hour: chunk})
            previous = (hour, gpus)
    return rounds


def dirty_hours_process(*, limit: int = 2000, due_by: datetime | None = None) -> int:
    """Recompute up to `limit` dirty GPU-hours, earliest due first: those due by `due_by`
    (the beat sweep passes now), or every mark (None: a catch-up). Idempotent; a GPU
    another worker is recomputing is left for the next sweep. Returns marks done."""
    return sum(_round_sweep(marks_by_hour=round_marks)
               for round_marks in _rounds(_due_marks(limit=limit, due_by=due_by)))
