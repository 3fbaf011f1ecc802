"""What gets recomputed when, and why: every change that alters how past GPU seconds
are attributed marks the GPU-hours it touches in the outbox (`DirtyGpuHour`), in the
transaction of the change; the usage app's sweep (`gpuquota.usage.sweep`) recomputes them.

Who marks (each through a function of this module, never by importing usage):
- ingest: every stored sample, process record and event marks its GPU-hour;
- reservations: an assignment made, changed or ended marks its GPUs' hours;
- inventory: a GPU moved between nodes, a class or node change from then on;
- accounts: a cluster identity or a billing membership changed marks the hours of the
  processes it re-attributes;
- rates: a rate card created, ended or changed has usage re-price its rollups (the
  `RATE_CARD_CHANGED` hook), which marks the hours a boundary cuts;
- health (in ingest): a failed/degraded interval opened, moved or closed marks what it
  covers.

When a mark is due (`due_at`, coalescing), so that the bound holds at its worst: the sweep
after the due time comes up to one beat interval later and takes up to its budget, so
both are subtracted from the bound (`mark_due_at`). An hour still open is due at the
earlier of "now + the freshness interval" and "its end + the final delay", less that
slack: a burst of batches costs one recompute per interval, and one more once the hour
is closed; a mark for a closed hour (late data, an edit) is due at once.

Re-marking, without churn: a mark of an hour that already has one keeps the earlier due
time and, while it waits for that time, is left as it is (no new row version: in the
steady state every batch re-marks the hours of its GPUs). Only a mark that is already
due, which a sweep may have read, gets its `generation` bumped (not an indexed column:
a HOT update on the table's free space, fillfactor 50), so that sweep leaves it for the
next; and only an earlier due time moves `due_at`. `marked_at` stays the first mark's:
the oldest change its hour's rollups do not show yet. Nothing arriving during a sweep is
lost however the marks are read: the sweep removes a mark before it reads the hour's
inputs, in the transaction that writes the rows (`gpuquota.usage.sweep`); a change that
marks before that removal holds the mark's row lock until it commits, so the removal
waits and the reads see it; one that marks after it waits for the sweep to commit and
then inserts a new mark.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.apps import apps
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor, hours_between
from gpuquota.outbox.conf import (
    dirty_sweep_budget_s,
    dirty_sweep_interval_s,
    rollup_final_delay_s,
    rollup_freshness_s,
)
from gpuquota.outbox.models import DirtyGpuHour

HOUR = timedelta(hours=1)
#: The longest sample window the protocol allows (agent-protocol.md: 1..600 s).
MAX_WINDOW_S = 600

_TABLE = DirtyGpuHour._meta.db_table
_MARK_SQL = (
    f"INSERT INTO {_TABLE} (gpu_id, hour, generation, marked_at, due_at) "
    "{values} ON CONFLICT (gpu_id, hour) DO UPDATE SET "
    f"generation = {_TABLE}.generation + 1, "
    f"due_at = CASE WHEN EXCLUDED.due_at < {_TABLE}.due_at THEN EXCLUDED.due_at "
    f"ELSE {_TABLE}.due_at END "
    f"WHERE EXCLUDED.due_at < {_TABLE}.due_at OR {_TABLE}.due_at <= EXCLUDED.marked_at"
)
# On PostgreSQL the marks go as arrays: the statement's text is the same for any count.
_MARK_ARRAYS_SQL = _MARK_SQL.format(values=(
    "SELECT v.gpu_id, v.hour, 1, %s::timestamptz, v.due_at FROM "
    "unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS v(gpu_id, hour, due_at)"))


def mark_due_at(*, hour: datetime, now: datetime) -> datetime:
    """When the sweep takes a mark of `hour` made at `now`: early enough that the sweep
    after it, one beat interval later at worst and within its budget, has rolled it up
    inside the freshness interval (or the final delay, for a closed hour)."""
    slack = timedelta(seconds=dirty_sweep_interval_s() + dirty_sweep_budget_s())
    fresh_by = now + timedelta(seconds=rollup_freshness_s()) - slack
    final_by = hour + HOUR + timedelta(seconds=rollup_final_delay_s()) - slack
    return max(now, min(fresh_by, final_by))


def gpu_hours_mark_dirty(*, marks: Iterable[tuple[int, datetime]]) -> int:
    """Mark (gpu_id, any instant in the hour) pairs for recompute, in the caller's
    transaction; marking twice is harmless. Returns how many distinct hours."""
    pairs = sorted({(gpu_id, hour_floor(at)) for gpu_id, at in marks})
    if not pairs:
        return 0
    adapt = connection.ops.adapt_datetimefield_value
    now = timezone.now()
    marked_at = adapt(now)
    due = {hour: adapt(mark_due_at(hour=hour, now=now)) for hour in {h for _, h in pairs}}
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_MARK_ARRAYS_SQL, [
                marked_at, [gpu_id for gpu_id, _ in pairs], [adapt(hour) for _, hour in pairs],
                [due[hour] for _, hour in pairs]])
            return len(pairs)
        for offset in range(0, len(pairs), 500):
            chunk = pairs[offset : offset + 500]
            params: list = []
            for gpu_id, hour in chunk:
                params += [gpu_id, adapt(hour), 1, marked_at, due[hour]]
            values = "VALUES " + ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
            cursor.execute(_MARK_SQL.format(values=values), params)
    return len(pairs)



def gpu_interval_mark_dirty(*, gpu_ids: Iterable[int], start: datetime, end: datetime) -> int:
    """Mark every hour of [start, end) dirty for these GPUs (a reservation, health
    or identity change that alters how their past seconds are attributed)."""
    hours = hours_between(start, end)
    return gpu_hours_mark_dirty(marks=[(gpu_id, hour) for gpu_id in gpu_ids for hour in hours])


# The functions below choose which hours to mark by reading the tables of the apps above
# (samples, process records, rollups, identities) by name, so no domain app imports another
# to mark.

def _model(label: str):
    return apps.get_model(label)


def gpu_usage_mark_dirty(*, gpu_id: int, start: datetime, end: datetime) -> int:
    """Like `gpu_interval_mark_dirty` for one physical GPU, but only the hours that have
    samples or rollup rows (the others would recompute to nothing): for long open
    intervals such as a health change."""
    gpu, sample, usage = (_model("inventory.Gpu"), _model("ingest.Sample"),
                          _model("usage.GpuHourUsage"))
    devices = gpu.objects.filter(Q(id=gpu_id) | Q(parent_id=gpu_id)).values("id")
    sample_hours = (
        sample.objects.filter(gpu_id__in=devices,
                              window_start__gte=start - timedelta(seconds=MAX_WINDOW_S),
                              window_start__lt=end)
        .annotate(h=TruncHour("window_start")).values_list("h", flat=True).distinct()
    )
    row_hours = usage.objects.filter(
        gpu_id=gpu_id, hour__gte=hour_floor(start), hour__lt=end
    ).values_list("hour", flat=True).distinct()
    hours = {max(h, hour_floor(start)) for h in [*sample_hours, *row_hours]}
    return gpu_hours_mark_dirty(marks=[(gpu_id, hour) for hour in hours])


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
    records = _model("ingest.ProcessRecord").objects.filter(
        gpu__node__cluster_id=cluster_id, window_end__gt=start, **{field: key}
    )
    if end is not None:
        records = records.filter(window_start__lt=end)
    return _process_hours_mark_dirty(records)


def membership_change_mark_dirty(*, user_id: int, start: datetime, end: datetime | None) -> int:
    """Call in the transaction that adds, edits or ends a billing membership: marks the
    GPU-hours of [start, end) where this user's unix identities ran processes."""
    identities = _model("accounts.ClusterIdentity").objects.filter(
        user_id=user_id, kind__in=["unix_user", "unix_uid"]
    ).values_list("cluster_id", "kind", "key")
    return sum(
        identity_change_mark_dirty(cluster_id=cluster_id, kind=kind, key=key, start=start,
                                   end=end)
        for cluster_id, kind, key in identities
    )
