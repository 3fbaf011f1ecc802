from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor, hours_between
from gpuquota.usage.models import DirtyGpuHour

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
