"""Rollup rows written: brought up to date per GPU-hour from the current inputs
(accounting.md), under a per-GPU-hour lock between workers."""

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.partitions import raw_data_horizon
from gpuquota.inventory.models import Gpu
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import usage_inputs_load
from gpuquota.usage.rollup_fleet import FleetChanges
from gpuquota.usage.rollup_rows import rollup_rows, rollup_rows_write

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
_LOCK_NAMESPACE = 0x75736167  # "usag": per-GPU locks (health evaluation)


def _hour_key_sql(gpu: str) -> str:
    """A per-GPU-hour lock's bigint key: 0x7573 ("us") << 48 | gpu id << 24 | hour number,
    the hour a parameter (ids and hour numbers are below 2**24; a collision of two
    GPU-hours would only make a worker wait)."""
    return f"(29555::bigint << 48) | (({gpu}::bigint & 16777215) << 24) | %s::bigint"


def _hour_number(hour: datetime) -> int:
    return int(hour.timestamp()) // 3600 & 0xFFFFFF


def _gpu_hour_lock(gpu_id: int, hour: datetime) -> None:
    """Serialise recomputes of one GPU-hour between workers (PostgreSQL; SQLite writes are
    serial anyway). An advisory lock, so ingestion, which never takes it, is not held up."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_advisory_xact_lock({_hour_key_sql('%s')})",
                           [gpu_id, _hour_number(hour)])


def gpu_hours_try_lock(*, gpu_ids: list[int], hour: datetime) -> set[int]:
    """Take the recompute locks of these physical GPUs' hour that are free, in one
    statement, until the transaction ends; returns the ids locked (another worker holds
    the rest). Other hours of the same GPUs stay free for other workers."""
    if connection.vendor != "postgresql":
        return set(gpu_ids)
    with connection.cursor() as cursor:
        cursor.execute("SELECT g FROM unnest(%s::int[]) AS g WHERE "
                       f"pg_try_advisory_xact_lock({_hour_key_sql('g')})",
                       [sorted(set(gpu_ids)), _hour_number(hour)])
        return {row[0] for row in cursor.fetchall()}


def gpus_lock(*, gpu_ids: list[int]) -> None:
    """Wait for the per-GPU locks of these physical GPUs, in id order, until the
    transaction ends: health evaluation changes intervals that span hours, so two
    workers never evaluate one GPU at once (PostgreSQL; SQLite writes are serial)."""
    if connection.vendor == "postgresql" and gpu_ids:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(pg_advisory_xact_lock(%s::int, g)) FROM "
                           "unnest(%s::int[]) AS g", [_LOCK_NAMESPACE, sorted(set(gpu_ids))])


def gpu_hours_replace(*, gpu_ids: list[int], hour: datetime, hours: int = 1,
                      fleet: FleetChanges | None = None) -> int:
    """Bring the rollup rows of these physical GPUs for `hours` consecutive hours from
    `hour` up to date with the current inputs, loaded for all of them in one round of
    queries (a back-filled day: once for the span, not once per hour), writing only what
    changed; the caller holds their locks. Running it twice gives the same rows (the
    second writes nothing); the fleet rows' changes go to `fleet` when given (see
    `rollup_rows_write`). Returns the row count."""
    span = [hour + i * HOUR for i in range(hours)]
    inputs = usage_inputs_load(gpu_ids=gpu_ids, start=hour, end=hour + hours * HOUR)
    rows = rollup_rows(inputs=inputs, gpu_ids=gpu_ids, hours=span)
    rollup_rows_write(gpu_ids=gpu_ids, hours=span, rows=rows, fleet=fleet)
    return len(rows)


def gpu_class_hours_reprice(*, gpu_class_id: int, start: datetime, end: datetime | None,
                            card_id: int | None) -> int:
    """The class's rate card in force over [start, end) is now `card_id` (the caller, a
    rate-card service, holds the class's lock): rollup rows of whole hours inside are
    relabelled in place (no row is cut there; day rows keep no card); the hours a boundary
    cuts, and hours waiting in the outbox (a recompute may be reading the old cards right
    now), are marked for recompute. Returns the hours marked."""
    in_range = DirtyGpuHour.objects.filter(hour__gte=hour_floor(start))
    if end is not None:
        in_range = in_range.filter(hour__lt=end)
    marks = list(in_range.values_list("gpu_id", "hour"))
    of_class = GpuHourUsage.objects.filter(gpu_class_id=gpu_class_id)
    for bound in (start, end):
        if bound is not None and bound != hour_floor(bound):
            cut = of_class.filter(hour=hour_floor(bound))
            marks += cut.values_list("gpu_id", "hour").distinct()
    marked = gpu_hours_mark_dirty(marks=marks)
    whole = of_class.filter(hour__gte=start)
    if end is not None:
        whole = whole.filter(hour__lte=end - HOUR)
    whole.update(rate_card_id=card_id)
    return marked


@transaction.atomic
def gpu_hour_recompute(*, gpu_id: int, hour: datetime) -> int:
    """Replace the rollup rows of one physical GPU-hour with rows computed from the
    current inputs; running it twice gives the same rows. Returns the row count."""
    gpu_id = Gpu.objects.filter(id=gpu_id).values_list("parent_id", flat=True).first() or gpu_id
    hour = hour_floor(hour)
    if hour < raw_data_horizon():
        # Raw data of this hour is expired: its rollups are all that is left; keep them.
        logger.warning("not recomputing gpu %s hour %s: raw data expired", gpu_id, hour)
        return -1
    _gpu_hour_lock(gpu_id, hour)
    return gpu_hours_replace(gpu_ids=[gpu_id], hour=hour)
