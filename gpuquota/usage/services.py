"""Rollup rows written: replaced per GPU-hour from the current inputs (accounting.md)."""

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest import conf as ingest_conf
from gpuquota.inventory.models import Gpu
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import usage_buckets, usage_inputs_load

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
_LOCK_NAMESPACE = 0x75736167  # "usag"


def raw_data_horizon() -> datetime:
    """Hours before this have (or may soon have) lost their raw samples."""
    days = ingest_conf.RAW_SAMPLE_RETENTION_DAYS - 1
    return hour_floor(timezone.now() - timedelta(days=days))


def _gpu_lock(gpu_id: int) -> None:
    """Serialise recomputes of one GPU between workers (PostgreSQL; SQLite writes are
    serial anyway). An advisory lock, so ingestion, which never takes it, is not held up."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, gpu_id])


def gpus_try_lock(*, gpu_ids: list[int]) -> set[int]:
    """Take the recompute locks of these physical GPUs that are free, in one statement,
    until the transaction ends; returns the ids locked (another worker holds the rest)."""
    if connection.vendor != "postgresql":
        return set(gpu_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT g FROM unnest(%s::int[]) AS g WHERE pg_try_advisory_xact_lock(%s::int, g)",
            [sorted(set(gpu_ids)), _LOCK_NAMESPACE])
        return {row[0] for row in cursor.fetchall()}


def gpu_hours_replace(*, gpu_ids: list[int], hour: datetime) -> int:
    """Replace the rollup rows of these physical GPUs for one hour with rows computed
    from the current inputs, loaded for all of them in one round of queries; the caller
    holds their locks. Running it twice gives the same rows. Returns the row count."""
    inputs = usage_inputs_load(gpu_ids=gpu_ids, start=hour, end=hour + HOUR)
    now = timezone.now()
    rows = [
        GpuHourUsage(
            gpu_id=gpu_id, hour=hour, gpu_class_id=key.gpu_class_id, kind=key.kind,
            assignment_id=key.assignment_id, reservation_id=key.reservation_id,
            team_id=key.team_id, split_ways=key.split_ways, failed=key.failed,
            rate_card_id=key.rate_card_id,
            covered_s=bucket.covered_s, busy_s=bucket.busy_s,
            util_weighted=bucket.util_weighted, energy_j=bucket.energy_j,
            memory_used_bytes_max=bucket.memory_used_bytes_max,
            process_count=len(bucket.processes), users_seen=sorted(bucket.users),
            computed_at=now,
        )
        for gpu_id in gpu_ids
        for key, bucket in usage_buckets(inputs=inputs, gpu_id=gpu_id).items()
    ]
    GpuHourUsage.objects.filter(gpu_id__in=gpu_ids, hour=hour).delete()
    GpuHourUsage.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


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
    _gpu_lock(gpu_id)
    return gpu_hours_replace(gpu_ids=[gpu_id], hour=hour)
