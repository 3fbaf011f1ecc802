"""Day rows (`GpuDayUsage`): the hourly rollup rows of a GPU and UTC day summed per
bucket, changed by the same write as the hourly rows (`rollup_rows.rollup_rows_write`).

The write hands over what it changed, as signed differences per hourly row; here they
are summed per day bucket and applied to the stored day rows. The GPU-days are locked
first (advisory locks, in key order), so two workers writing hours of one GPU-day wait for
each other instead of deadlocking: row locks alone cannot order a bucket one worker
inserts while the other updates a bucket it found stored. A bucket whose last hourly row
went is deleted. `rollup_days_rebuild` sums
the hourly rows afresh: for rows written by SQL (the benches' seeding) or a repair.
"""

from collections import defaultdict
from datetime import UTC, date, datetime, time
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

from gpuquota.usage.models import GpuDayUsage, GpuHourUsage

#: A day row's bucket (with its day): an hourly row's bucket less the rate card, which
#: `rollup_rows.KEY` adds last.
KEY = ("gpu_id", "kind", "gpu_class_id", "assignment_id", "reservation_id", "team_id",
       "split_ways", "failed")
SUMS = ("hours", "covered_s", "busy_s", "util_weighted")
_DAY_TABLE = GpuDayUsage._meta.db_table
_EPOCH = date(1970, 1, 1)
#: The unique bucket constraint's columns, as PostgreSQL infers its expression index.
_CONFLICT = ("gpu_id, day, gpu_class_id, kind, COALESCE(assignment_id, 0), "
             "COALESCE(team_id, 0), split_ways, failed")


class DayChanges:
    """Signed changes to day buckets, gathered from the hourly rows one write changes."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, Decimal(0)])

    def add(self, hourly_key: tuple, figures: tuple, sign: int, *, row: bool) -> None:
        """Count an hourly row's (hour, KEY values) figures in (`sign` 1) or out (-1);
        `row`: the row itself comes or goes (not only its figures)."""
        hour, *key = hourly_key[:1 + len(KEY)]  # the rate card is last: left out
        change = self.by_key[(hour.astimezone(UTC).date(), *key)]
        change[0] += sign if row else 0
        change[1] += sign * figures[0]
        change[2] += sign * figures[1]
        change[3] += sign * Decimal(figures[2])

    def apply(self) -> None:
        """Apply the changes to the stored day rows, in the caller's transaction."""
        changes = {key: change for key, change in self.by_key.items() if any(change)}
        if not changes:
            return
        _gpu_days_lock(changes)
        stored = _stored_locked(changes)
        updated, created, gone = [], [], []
        for key, change in sorted(changes.items(), key=lambda item: _order(item[0])):
            if key in stored:
                row_id, sums = stored[key]
                total = [a + b for a, b in zip(sums, change, strict=True)]
                (gone if total[0] == 0 else updated).append((row_id, total))
            else:
                created.append((key, change))
        if gone:
            GpuDayUsage.objects.filter(id__in=[row_id for row_id, _ in gone]).delete()
        if updated:
            _update(updated)
        if created:
            _insert(created)


def _order(key: tuple) -> tuple:
    """A day key sortable whatever its empty (None) references."""
    return tuple((value is None, value if value is not None else 0) for value in key)


def _gpu_days_lock(changes: dict) -> None:
    """Wait for the GPU-days these changes touch, in key order, until the transaction
    ends (PostgreSQL; SQLite writes are serial). A key is 0x7564 ("ud") << 48 | GPU id << 24
    | days since 1970 (ids and day numbers below 2**24; a collision only makes one wait)."""
    if connection.vendor != "postgresql":
        return
    keys = sorted({(0x7564 << 48) | ((key[1] & 0xFFFFFF) << 24) | ((key[0] - _EPOCH).days
                                                                  & 0xFFFFFF)
                   for key in changes})
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_advisory_xact_lock(k)) FROM "
                       "(SELECT unnest(%s::bigint[]) AS k ORDER BY 1) AS keys", [keys])


def _stored_locked(changes: dict) -> dict[tuple, tuple[int, list]]:
    gpu_ids = sorted({key[1] for key in changes})
    days = sorted({key[0] for key in changes})
    rows = GpuDayUsage.objects.filter(gpu_id__in=gpu_ids, day__in=days).order_by("id")
    if connection.vendor == "postgresql":
        rows = rows.select_for_update()
    return {(row[1], *row[2:2 + len(KEY)]): (row[0], list(row[2 + len(KEY):]))
            for row in rows.values_list("id", "day", *KEY, *SUMS)}


def _update(updated: list[tuple[int, list]]) -> None:
    if connection.vendor != "postgresql":
        GpuDayUsage.objects.bulk_update(
            [GpuDayUsage(id=row_id, **dict(zip(SUMS, total, strict=True)))
             for row_id, total in updated], list(SUMS), batch_size=500)
        return
    columns = [list(column) for column in zip(*((row_id, *total) for row_id, total in updated),
                                              strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_DAY_TABLE} AS d SET hours = v.hours, covered_s = v.covered_s, "
            "busy_s = v.busy_s, util_weighted = v.util_weighted FROM unnest(%s::bigint[], "
            "%s::integer[], %s::integer[], %s::integer[], %s::numeric[]) "
            "AS v(id, hours, covered_s, busy_s, util_weighted) WHERE d.id = v.id", columns)


def _insert(created: list[tuple[tuple, list]]) -> None:
    """New buckets. A bucket nobody had when the rows were locked can be created by a
    concurrent write of another hour of the GPU's day: its sums are then added."""
    if connection.vendor != "postgresql":
        GpuDayUsage.objects.bulk_create(
            [GpuDayUsage(day=key[0], **dict(zip(KEY, key[1:], strict=True)),
                         **dict(zip(SUMS, change, strict=True))) for key, change in created],
            batch_size=2000)
        return
    columns = [list(column) for column in zip(*((*key, *change) for key, change in created),
                                              strict=True)]
    names = ", ".join(("day", *KEY, *SUMS))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_DAY_TABLE} AS d ({names}) SELECT {names} FROM unnest("
            "%s::date[], %s::bigint[], %s::varchar[], %s::bigint[], %s::bigint[], "
            "%s::bigint[], %s::bigint[], %s::smallint[], %s::boolean[], "
            "%s::integer[], %s::integer[], %s::integer[], %s::numeric[]) WITH ORDINALITY "
            f"AS v({names}, n) ORDER BY n ON CONFLICT ({_CONFLICT}) DO UPDATE SET "
            "hours = d.hours + EXCLUDED.hours, covered_s = d.covered_s + EXCLUDED.covered_s, "
            "busy_s = d.busy_s + EXCLUDED.busy_s, "
            "util_weighted = d.util_weighted + EXCLUDED.util_weighted", columns)


def rollup_days_rebuild(*, start: date | None = None, end: date | None = None) -> int:
    """Replace the day rows of the UTC days in [start, end) (all when not given) with the
    sums of their hourly rows. Returns the day rows written."""
    days = GpuDayUsage.objects.all()
    hours = GpuHourUsage.objects.all()
    if start is not None:
        days = days.filter(day__gte=start)
        hours = hours.filter(hour__gte=datetime.combine(start, time(), UTC))
    if end is not None:
        days = days.filter(day__lt=end)
        hours = hours.filter(hour__lt=datetime.combine(end, time(), UTC))
    days.delete()
    sums = (hours.annotate(day=TruncDate("hour", tzinfo=UTC)).values("day", *KEY).order_by()
            .annotate(hours=Count("id"), covered_s=Sum("covered_s"), busy_s=Sum("busy_s"),
                      util_weighted=Sum("util_weighted")))
    if connection.vendor != "postgresql":
        return len(GpuDayUsage.objects.bulk_create([GpuDayUsage(**row) for row in sums],
                                                   batch_size=2000))
    names = ", ".join(("day", *KEY, *SUMS))
    sql, params = sums.query.sql_with_params()
    with connection.cursor() as cursor:  # in the database: a month of 10,000 GPUs is 7 M rows
        cursor.execute(f"INSERT INTO {_DAY_TABLE} ({names}) SELECT {names} FROM ({sql}) AS s",
                       params)
        return cursor.rowcount
