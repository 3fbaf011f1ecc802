"""Rollup rows written as a difference against what is stored (issue 13: table churn).

A recompute that changes nothing writes nothing; a bucket whose figures changed is
updated in place, only its unindexed figure columns, so PostgreSQL can keep the new
version on the same page (a HOT update, which page pruning reclaims without a vacuum:
the table keeps free room for it, migration 0005); only new buckets are inserted (COPY
on PostgreSQL) and only vanished ones deleted. `computed_at` is when a row's figures
last changed. The same differences change the day rows (`rollup_days`) and the fleet's
(`rollup_fleet`).
"""

import json
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import UsageInputs, usage_buckets
from gpuquota.usage.rollup_days import KEY as DAY_KEY
from gpuquota.usage.rollup_days import DayChanges
from gpuquota.usage.rollup_fleet import FleetChanges, fleet_changes_apply

HOUR = timedelta(hours=1)
#: A row's bucket, as stored (the unique bucket constraint's columns and the reservation).
KEY = (*DAY_KEY, "rate_card_id")
#: A row's figures: the only columns an update writes (none of them indexed).
FIGURES = ("covered_s", "busy_s", "util_weighted", "energy_j", "memory_used_bytes_max",
           "process_count", "users_seen")


def rollup_rows(*, inputs: UsageInputs, gpu_ids: list[int],
                hours: list[datetime]) -> dict[tuple, tuple]:
    """The rows the rollup rule gives these physical GPUs for these hours of the loaded
    window: {(hour, KEY values): FIGURES values}."""
    return {
        (hour, gpu_id, key.kind, key.gpu_class_id, key.assignment_id, key.reservation_id,
         key.team_id, key.split_ways, key.failed, key.rate_card_id):
        (bucket.covered_s, bucket.busy_s, bucket.util_weighted, bucket.energy_j,
         bucket.memory_used_bytes_max, len(bucket.processes), sorted(bucket.users))
        for hour in hours for gpu_id in gpu_ids
        for key, bucket in usage_buckets(inputs=inputs, gpu_id=gpu_id, start=hour,
                                         end=hour + HOUR).items()
    }


def rollup_rows_write(*, gpu_ids: list[int], hours: list[datetime],
                      rows: dict[tuple, tuple], fleet: FleetChanges | None = None) -> int:
    """Make the stored rows of these GPUs for these hours exactly `rows` (keyed by hour
    and KEY), writing only the difference, and their day rows with it. The fleet rows'
    changes are added to `fleet` for the caller to apply last in its transaction (a
    sweep round of several writes), or applied here when not given. Returns the hourly
    rows written (inserted, updated or deleted)."""
    stored = {row[1:2 + len(KEY)]: (row[0], row[2 + len(KEY):]) for row in
              GpuHourUsage.objects.filter(gpu_id__in=gpu_ids, hour__in=hours)
              .values_list("id", "hour", *KEY, *FIGURES)}
    vanished, changed, days = [], [], DayChanges()
    changes = FleetChanges() if fleet is None else fleet

    def count(key: tuple, figures: tuple, sign: int, *, row: bool) -> None:
        days.add(key, figures, sign, row=row)
        changes.add(key, figures, sign, row=row)
    for key, (row_id, figures) in stored.items():
        if key not in rows:
            vanished.append(row_id)
            count(key, figures, -1, row=True)
        elif rows[key] != figures:
            changed.append((row_id, rows[key]))
            count(key, figures, -1, row=False)
            count(key, rows[key], 1, row=False)
    new = [(key, figures) for key, figures in rows.items() if key not in stored]
    for key, figures in new:
        count(key, figures, 1, row=True)
    now = timezone.now()
    if vanished:
        GpuHourUsage.objects.filter(id__in=vanished).delete()
    if changed:
        _update(changed, now)
    if new:
        _insert(new, now)
    days.apply()
    if fleet is None:
        fleet_changes_apply(changes)
    return len(vanished) + len(changed) + len(new)


def _update(changed: list[tuple[int, tuple]], now: datetime) -> None:
    if connection.vendor != "postgresql":
        objs = [GpuHourUsage(id=row_id, computed_at=now, **dict(zip(FIGURES, figures,
                                                                     strict=True)))
                for row_id, figures in changed]
        GpuHourUsage.objects.bulk_update(objs, [*FIGURES, "computed_at"], batch_size=500)
        return
    columns = list(zip(*((row_id, *figures[:-1], json.dumps(figures[-1]))
                         for row_id, figures in changed), strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {GpuHourUsage._meta.db_table} AS u SET covered_s = v.covered_s, "
            "busy_s = v.busy_s, util_weighted = v.util_weighted, energy_j = v.energy_j, "
            "memory_used_bytes_max = v.memory_max, process_count = v.process_count, "
            "users_seen = v.users_seen::jsonb, computed_at = %s "
            "FROM unnest(%s::bigint[], %s::integer[], %s::integer[], %s::numeric[], "
            "%s::double precision[], %s::bigint[], %s::integer[], %s::text[]) AS v(id, "
            "covered_s, busy_s, util_weighted, energy_j, memory_max, process_count, "
            "users_seen) WHERE u.id = v.id",
            [now, *map(list, columns)])


def _insert(new: list[tuple[tuple, tuple]], now: datetime) -> None:
    if connection.vendor != "postgresql":
        GpuHourUsage.objects.bulk_create(
            [GpuHourUsage(computed_at=now, **dict(zip(("hour", *KEY), key, strict=True)),
                          **dict(zip(FIGURES, figures, strict=True)))
             for key, figures in new], batch_size=2000)
        return
    columns = ", ".join(("hour", *KEY, *FIGURES, "computed_at"))
    with connection.cursor() as cursor, cursor.copy(
            f"COPY {GpuHourUsage._meta.db_table} ({columns}) FROM STDIN") as copy:
        for key, figures in new:
            copy.write_row((*key, *figures[:-1], json.dumps(figures[-1]), now))
