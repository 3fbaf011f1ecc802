"""Fleet rows (`FleetHourUsage`, `FleetDayUsage`): the hourly rollup rows of the whole
fleet summed per hour (and per UTC day) and per bucket the utilization page groups by
(class, kind, owner team of unreserved time, split_ways, failed), changed by the same
write as the hourly rows (`rollup_rows.rollup_rows_write`), so the page reads a few
rows per hour instead of one per GPU (issue 34).

The write hands over what it changed, as signed differences per hourly row, like the day
rows (`rollup_days`); here they are summed per fleet bucket of the hour and of the day and
added to the stored rows at the end of the writer's transaction (`fleet_changes_apply`
after the last write of a sweep round): every worker of the sweep changes the same few
rows, so they are locked last, in key order, and held only until the commit. Additions
commute, so concurrent workers need no other order. A bucket whose count of hourly rows
falls to 0 is deleted. `rollup_fleet_rebuild` sums the hourly and day rows afresh: for
rows written by SQL (the benches' seeding), a repair, and the migration that added them.
"""

from collections import defaultdict
from datetime import UTC, date, datetime, time
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Sum

from gpuquota.usage.models import (
    FleetDayUsage,
    FleetHourUsage,
    GpuDayUsage,
    GpuHourUsage,
)

#: A fleet bucket, after its hour or day (the owner: the team of unreserved rows only).
KEY = ("gpu_class_id", "kind", "owner_id", "split_ways", "failed")
SUMS = ("hourly_rows", "covered_s", "busy_s", "util_weighted")
UNRESERVED = GpuHourUsage.Kind.UNRESERVED
#: Where an hourly key (hour, gpu, kind, class, assignment, reservation, team, split
#: ways, failed, ...) holds what a fleet key needs.
_KIND, _CLASS, _TEAM, _SPLIT, _FAILED = 2, 3, 6, 7, 8


class FleetChanges:
    """Signed changes to fleet buckets, gathered from the hourly rows writes change."""

    def __init__(self) -> None:
        self.hours: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, Decimal(0)])
        self.days: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, Decimal(0)])

    def add(self, hourly_key: tuple, figures: tuple, sign: int, *, row: bool) -> None:
        """Count an hourly row's (hour, bucket) figures in (`sign` 1) or out (-1); `row`:
        the row itself comes or goes (not only its figures)."""
        hour = hourly_key[0]
        kind = hourly_key[_KIND]
        key = (hourly_key[_CLASS], kind, hourly_key[_TEAM] if kind == UNRESERVED else None,
               hourly_key[_SPLIT], hourly_key[_FAILED])
        for change in (self.hours[(hour, *key)],
                       self.days[(hour.astimezone(UTC).date(), *key)]):
            change[0] += sign if row else 0
            change[1] += sign * figures[0]
            change[2] += sign * figures[1]
            change[3] += sign * Decimal(figures[2])


def fleet_changes_apply(changes: FleetChanges) -> None:
    """Add the changes to the stored fleet rows, in the caller's transaction: hours
    first, then days, each in key order."""
    for model, by_key in ((FleetHourUsage, changes.hours), (FleetDayUsage, changes.days)):
        nonzero = {key: change for key, change in by_key.items() if any(change)}
        if not nonzero:
            continue
        ordered = sorted(nonzero.items(), key=lambda item: _order(item[0]))
        if connection.vendor == "postgresql":
            _upsert(model, ordered)
        else:
            _apply_orm(model, ordered)
    changes.hours.clear()
    changes.days.clear()


def _order(key: tuple) -> tuple:
    """A fleet key sortable whatever its empty (None) owner."""
    return tuple((value is None, value if value is not None else 0) for value in key)


def _when(model) -> str:
    return "hour" if model is FleetHourUsage else "day"


def _upsert(model, ordered: list[tuple[tuple, list]]) -> None:
    when, table = _when(model), model._meta.db_table
    names = ", ".join((when, *KEY, *SUMS))
    columns = [list(column) for column in zip(*((*key, *change) for key, change in ordered),
                                              strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS f ({names}) SELECT {names} FROM unnest("
            f"%s::{'timestamptz' if when == 'hour' else 'date'}[], %s::bigint[], "
            "%s::varchar[], %s::bigint[], %s::smallint[], %s::boolean[], %s::integer[], "
            "%s::bigint[], %s::bigint[], %s::numeric[]) WITH ORDINALITY "
            f"AS v({names}, n) ORDER BY n ON CONFLICT ({when}, gpu_class_id, kind, "
            "COALESCE(owner_id, 0), split_ways, failed) DO UPDATE SET "
            "hourly_rows = f.hourly_rows + EXCLUDED.hourly_rows, "
            "covered_s = f.covered_s + EXCLUDED.covered_s, "
            "busy_s = f.busy_s + EXCLUDED.busy_s, "
            "util_weighted = f.util_weighted + EXCLUDED.util_weighted", columns)
        cursor.execute(f"DELETE FROM {table} WHERE hourly_rows = 0 AND {when} = ANY(%s)",
                       [sorted({key[0] for key, _change in ordered})])


def _apply_orm(model, ordered: list[tuple[tuple, list]]) -> None:
    """The same without PostgreSQL (SQLite: writes are serial)."""
    when, width = _when(model), 1 + len(KEY)
    stored = {row[:width]: (row[width], row[width + 1:]) for row in model.objects.filter(
        **{f"{when}__in": {key[0] for key, _change in ordered}}).values_list(
        when, *KEY, "id", *SUMS)}
    updated, created, gone = [], [], []
    for key, change in ordered:
        if key not in stored:
            created.append(model(**dict(zip((when, *KEY), key, strict=True)),
                                 **dict(zip(SUMS, change, strict=True))))
            continue
        row_id, sums = stored[key]
        total = [a + b for a, b in zip(sums, change, strict=True)]
        if total[0] == 0:
            gone.append(row_id)
        else:
            updated.append(model(id=row_id, **dict(zip(SUMS, total, strict=True))))
    model.objects.filter(id__in=gone).delete()
    model.objects.bulk_update(updated, list(SUMS), batch_size=500)
    model.objects.bulk_create(created, batch_size=500)


def fleet_rows(model, *, start, end) -> list:
    """The fleet rows of [start, end) (hours, or days) summed afresh from the hourly rows
    (from the day rows for days): the unreserved rows grouped with their team, the others
    without."""
    when = _when(model)
    rows = (GpuHourUsage if model is FleetHourUsage else GpuDayUsage).objects.filter(
        **{f"{when}__gte": start, f"{when}__lt": end})
    count = Count("id") if model is FleetHourUsage else Sum("hours")
    built = []
    for part, owned in ((rows.filter(kind=UNRESERVED), True),
                        (rows.exclude(kind=UNRESERVED), False)):
        group = (when, "gpu_class_id", "kind", "split_ways", "failed",
                 *(("team_id",) if owned else ()))
        for row in part.values(*group).order_by().annotate(
                n=count, covered=Sum("covered_s"), busy=Sum("busy_s"),
                util=Sum("util_weighted")):
            built.append(model(**{when: row[when]}, gpu_class_id=row["gpu_class_id"],
                               kind=row["kind"], owner_id=row.get("team_id"),
                               split_ways=row["split_ways"], failed=row["failed"],
                               hourly_rows=row["n"], covered_s=row["covered"], busy_s=row["busy"],
                               util_weighted=row["util"]))
    return built


def rollup_fleet_rebuild(*, start: date | None = None, end: date | None = None) -> int:
    """Replace the fleet rows of the UTC days in [start, end) (all when not given) with
    the sums of their hourly and day rows. Returns the fleet rows written."""
    first = datetime.combine(start or date.min, time(), UTC)
    last = datetime.combine(end or date.max, time(), UTC)
    written = 0
    for model, lo, hi in ((FleetHourUsage, first, last),
                          (FleetDayUsage, first.date(), last.date())):
        model.objects.filter(**{f"{_when(model)}__gte": lo, f"{_when(model)}__lt": hi}).delete()
        written += len(model.objects.bulk_create(fleet_rows(model, start=lo, end=hi),
                                                 batch_size=2000))
    return written
