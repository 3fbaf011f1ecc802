import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor, hours_between
from gpuquota.ingest import conf as ingest_conf
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.inventory.models import Gpu
from gpuquota.usage.conf import MAX_WINDOW_S
from gpuquota.usage.models import DirtyGpuHour, GpuHourUsage
from gpuquota.usage.rollup import usage_buckets, usage_inputs_load

logger = logging.getLogger(__name__)

_MARK_SQL = (
    f"INSERT INTO {DirtyGpuHour._meta.db_table} (gpu_id, hour, generation, marked_at) "
    "VALUES {values} ON CONFLICT (gpu_id, hour) DO UPDATE SET "
    f"generation = {DirtyGpuHour._meta.db_table}.generation + 1, marked_at = EXCLUDED.marked_at"
)


def gpu_hours_mark_dirty(*, marks: Iterable[tuple[int, datetime]]) -> int:
    """Mark (gpu_id, any instant in the hour) pairs for recompute, in the caller's
    transaction; marking twice is harmless. Returns how many distinct hours."""
    pairs = sorted({(gpu_id, hour_floor(at)) for gpu_id, at in marks})
    if not pairs:
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    now = adapt(timezone.now())
    with connection.cursor() as cursor:
        for offset in range(0, len(pairs), 500):
            chunk = pairs[offset : offset + 500]
            params: list = []
            for gpu_id, hour in chunk:
                params += [gpu_id, adapt(hour), 1, now]
            values = ", ".join(["(%s, %s, %s, %s)"] * len(chunk))
            cursor.execute(_MARK_SQL.format(values=values), params)
    return len(pairs)


def gpu_interval_mark_dirty(*, gpu_ids: Iterable[int], start: datetime, end: datetime) -> int:
    """Mark every hour of [start, end) dirty for these GPUs (a reservation, health
    or identity change that alters how their past seconds are attributed)."""
    hours = hours_between(start, end)
    return gpu_hours_mark_dirty(marks=[(gpu_id, hour) for gpu_id in gpu_ids for hour in hours])


# --- Rollups --------------------------------------------------------------------


def _gpu_lock(gpu_id: int) -> None:
    """Serialise recomputes of one GPU between workers (PostgreSQL; SQLite writes are
    serial anyway). An advisory lock, so ingestion, which never takes it, is not held up."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, gpu_id])


_LOCK_NAMESPACE = 0x75736167  # "usag"


def _physical_gpu_id(gpu_id: int) -> int:
    parent_id = Gpu.objects.filter(id=gpu_id).values_list("parent_id", flat=True).first()
    return parent_id or gpu_id


def _device_ids(gpu_id: int) -> QuerySet:
    return Gpu.objects.filter(Q(id=gpu_id) | Q(parent_id=gpu_id)).values("id")


def _samples_near(gpu_id: int, start: datetime, end: datetime) -> QuerySet:
    """Samples of the GPU and its MIG devices that may cover part of [start, end)."""
    return Sample.objects.filter(
        gpu_id__in=_device_ids(gpu_id),
        window_start__gte=start - timedelta(seconds=MAX_WINDOW_S), window_start__lt=end,
    )


def _has_samples(gpu_id: int, start: datetime, end: datetime) -> bool:
    return _samples_near(gpu_id, start, end).exists()


def gpu_usage_mark_dirty(*, gpu_id: int, start: datetime, end: datetime) -> int:
    """Like `gpu_interval_mark_dirty` for one physical GPU, but only the hours that have
    samples or rollup rows (the others would recompute to nothing): for long open
    intervals such as a health change."""
    sample_hours = (
        _samples_near(gpu_id, start, end).annotate(h=TruncHour("window_start"))
        .values_list("h", flat=True).distinct()
    )
    row_hours = GpuHourUsage.objects.filter(
        gpu_id=gpu_id, hour__gte=hour_floor(start), hour__lt=end
    ).values_list("hour", flat=True).distinct()
    hours = {max(h, hour_floor(start)) for h in [*sample_hours, *row_hours]}
    return gpu_hours_mark_dirty(marks=[(gpu_id, hour) for hour in hours])


def raw_data_horizon() -> datetime:
    """Hours before this have (or may soon have) lost their raw samples."""
    days = ingest_conf.RAW_SAMPLE_RETENTION_DAYS - 1
    return hour_floor(timezone.now() - timedelta(days=days))


@transaction.atomic
def gpu_hour_recompute(*, gpu_id: int, hour: datetime) -> int:
    """Replace the rollup rows of one physical GPU-hour with rows computed from the
    current inputs; running it twice gives the same rows. Returns the row count."""
    gpu_id = _physical_gpu_id(gpu_id)
    hour = hour_floor(hour)
    if hour < raw_data_horizon():
        # Raw data of this hour is expired: its rollups are all that is left; keep them.
        logger.warning("not recomputing gpu %s hour %s: raw data expired", gpu_id, hour)
        return -1
    _gpu_lock(gpu_id)
    if not _has_samples(gpu_id, hour, hour + timedelta(hours=1)):
        GpuHourUsage.objects.filter(gpu_id=gpu_id, hour=hour).delete()
        return 0
    inputs = usage_inputs_load(gpu_ids=[gpu_id], start=hour, end=hour + timedelta(hours=1))
    buckets = usage_buckets(inputs=inputs, gpu_id=gpu_id)
    now = timezone.now()
    GpuHourUsage.objects.filter(gpu_id=gpu_id, hour=hour).delete()
    GpuHourUsage.objects.bulk_create(
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
        for key, bucket in buckets.items()
    )
    return len(buckets)


def _gpu_try_lock(gpu_id: int) -> bool:
    """The GPU's recompute lock if free (PostgreSQL); another worker has it otherwise."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [_LOCK_NAMESPACE, gpu_id])
        return bool(cursor.fetchone()[0])


def dirty_hours_process(*, limit: int = 2000) -> int:
    """Recompute up to `limit` dirty GPU-hours, oldest mark first, each in its own
    transaction. The outbox row goes first, and only if its generation is unchanged, so
    a mark that lands during the recompute leaves (or re-creates) a row for the next
    sweep. A GPU another worker is recomputing is skipped. Returns hours recomputed."""
    from gpuquota.usage.health import gpu_health_evaluate

    oldest_first = DirtyGpuHour.objects.order_by("marked_at", "id")
    marks = list(oldest_first.values_list("id", "gpu_id", "hour", "generation")[:limit])
    parents = dict(Gpu.objects.filter(id__in={m[1] for m in marks}, parent__isnull=False)
                   .values_list("id", "parent_id"))
    done = 0
    for dirty_id, gpu_id, hour, generation in marks:
        physical = parents.get(gpu_id, gpu_id)
        with transaction.atomic():
            if not _gpu_try_lock(physical):
                continue
            if not DirtyGpuHour.objects.filter(id=dirty_id).exists():
                continue  # another worker did it since we read the outbox
            DirtyGpuHour.objects.filter(id=dirty_id, generation=generation).delete()
            gpu_health_evaluate(gpu_id=physical, hour=hour)
            gpu_hour_recompute(gpu_id=physical, hour=hour)
            done += 1
    return done


# --- Recompute triggers for changes made elsewhere --------------------------------


def _process_hours_mark_dirty(records: QuerySet) -> int:
    """Mark the physical GPU-hours of these process records dirty."""
    rows = (
        records.annotate(hour=TruncHour("window_start"))
        .values_list("gpu_id", "gpu__parent_id", "hour")
        .distinct()
    )
    return gpu_hours_mark_dirty(marks=[(parent or gpu, hour) for gpu, parent, hour in rows])


def identity_change_mark_dirty(
    *, cluster_id: int, kind: str, key: str, start: datetime, end: datetime | None
) -> int:
    """Call in the transaction that adds, edits or ends a cluster identity: marks the
    GPU-hours whose process windows in [start, end) it may re-attribute."""
    field = {
        "unix_user": "user",
        "unix_uid": "uid",
        "slurm_account": "job_account",
        "k8s_namespace": "job_account",
    }[kind]
    records = ProcessRecord.objects.filter(
        gpu__node__cluster_id=cluster_id, window_end__gt=start, **{field: key}
    )
    if end is not None:
        records = records.filter(window_start__lt=end)
    return _process_hours_mark_dirty(records)


def membership_change_mark_dirty(*, user_id: int, start: datetime, end: datetime | None) -> int:
    """Call in the transaction that adds, edits or ends a billing membership: marks the
    GPU-hours of [start, end) where this user's unix identities ran processes."""
    from accounts.models import ClusterIdentity

    marked = 0
    identities = ClusterIdentity.objects.filter(
        user_id=user_id, kind__in=[ClusterIdentity.Kind.UNIX_USER, ClusterIdentity.Kind.UNIX_UID]
    ).values_list("cluster_id", "kind", "key")
    for cluster_id, kind, key in identities:
        marked += identity_change_mark_dirty(
            cluster_id=cluster_id, kind=kind, key=key, start=start, end=end
        )
    return marked
