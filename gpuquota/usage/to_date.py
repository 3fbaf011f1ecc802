"""The pages' figures to date, read from the hourly rollups alone (accounting.md,
Utilization versus allocation). This is what the utilization page and the team page
show.

A page's period starts on a whole UTC hour: a month, or the last 24 h or 7 days. It
ends now. Each hour it touches is read from its rollup rows, in aggregate queries grouped
in SQL: the whole UTC days from the day rows (`GpuDayUsage`, 24 hours of a GPU in one
row), the hours around them from the hourly rows. The utilization page reads the whole
fleet's rows instead (`FleetDayUsage`, `FleetHourUsage`: the same sums per bucket it
groups by, a few rows an hour whatever the fleet, `rollup_fleet`).

The open hour is read as the sweep last computed it. That is at most
`USAGE_ROLLUP_FRESHNESS_S` behind its samples, and `freshness.usage_freshness` says
as of when. Reserved, in-service and failed seconds still count exactly to now, from
assignments and health intervals. So for the open hour, busy and covered time can lag
reserved time by up to that interval.

The selectors in `selectors` stay exact at any whole-second edge. They compute partial
hours from the raw samples, for any exact period. For a closed period, or once the open
hour's rollup is current, both give the same figures. The tests hold the two equal.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from fractions import Fraction

from django.db.models import Sum

from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.inventory.models import GpuClass
from gpuquota.usage.daily import DayUsage, day_windows, seconds_by_day
from gpuquota.usage.figures import FleetFigures, Sums, UsageFigures, sums_by
from gpuquota.usage.models import FleetDayUsage, FleetHourUsage, GpuDayUsage, GpuHourUsage
from gpuquota.usage.rollup import RESERVED, UNRESERVED
from gpuquota.usage.seconds import (
    CLASS_IN_FORCE,
    failed_qs,
    failed_reserved_qs,
    failed_reserved_seconds_by_class,
    failed_seconds_by_class,
    in_service_qs,
    in_service_seconds_by_class,
    reserved_by_class_qs,
    reserved_qs,
    seconds_total,
)
from gpuquota.usage.selectors import owner_rows

HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def rollup_hours(period: Period) -> tuple[datetime, datetime]:
    """The hours whose rollup rows a to-date figure of `period` reads: from its start,
    which must be on a whole hour, to its end rounded up to the hour."""
    if hour_floor(period.start) != period.start:
        raise ValueError("a page's period starts on a whole UTC hour")
    last = hour_floor(period.end)
    return period.start, last if last == period.end else last + HOUR


def _midnight_after(moment: datetime) -> datetime:
    day = datetime.combine(moment.astimezone(UTC).date(), time(), UTC)
    return day if day == moment else day + DAY


def rollup_sums(*, period: Period, by: tuple[str, ...], fleet: bool = False,
                **filters) -> list[dict]:
    """Covered, busy and util-weighted seconds of the period's rollup rows matching
    `filters`, grouped by `by` (rollup fields, or `day`, `month`, `owner`) and always by
    `failed` and `split_ways`, so that `figures.sums_by` folds them exactly (a group can
    come more than once: whole UTC days are read from the day rows, the hours before and
    after them from the hourly rows, each range in its own query so that it is an index
    range scan). `fleet`: the whole fleet's, read from its rows summed per hour and day
    (`rollup_fleet`: the same sums, a few rows an hour; no `filters`, and `by` of their
    bucket's fields). Three queries at most."""
    if fleet and filters:
        raise ValueError("the fleet's rows are not filtered")
    hourly, daily = (FleetHourUsage, FleetDayUsage) if fleet else (GpuHourUsage, GpuDayUsage)
    first, last = rollup_hours(period)
    day_start = _midnight_after(first)
    day_end = max(day_start, datetime.combine(last.astimezone(UTC).date(), time(), UTC))
    if day_start >= day_end:  # no whole day: one range of hours
        hours = [(first, last)]
    else:
        hours = [(start, end) for start, end in ((first, day_start), (day_end, last))
                 if start < end]
    sums = []
    for start, end in hours:
        sums += _grouped(hourly.objects.filter(hour__gte=start, hour__lt=end, **filters), by)
    if day_start < day_end:
        sums += _grouped(daily.objects.filter(
            day__gte=day_start.date(), day__lt=day_end.date(), **filters), by)
    return sums


def _grouped(rows, by: tuple[str, ...]) -> list[dict]:
    """`rows` summed in SQL by plain columns (no expression computed per row), the
    groups of `by` derived from them here: `day` and `month` from the hour or the day,
    `owner` (the owner team of unreserved time; reserved rows group without their team)
    from the kind and the team, or the fleet rows' owner."""
    when = "hour" if rows.model in (GpuHourUsage, FleetHourUsage) else "day"
    fleet = rows.model in (FleetHourUsage, FleetDayUsage)
    columns = {"failed", "split_ways"}
    for name in by:
        columns |= {when} if name in ("day", "month") else \
            {"owner_id"} if name == "owner" and fleet else \
            {"kind", "team_id"} if name == "owner" else {name}
    grouped = []
    for row in (rows.values(*sorted(columns)).order_by()
                .annotate(covered_s=Sum("covered_s"), busy_s=Sum("busy_s"),
                          util_weighted=Sum("util_weighted"))):
        day = row.get(when)
        if isinstance(day, datetime):
            day = day.astimezone(UTC).date()
        derived = {"day": day, "month": day and day.replace(day=1),
                   "owner": row["owner_id"] if fleet else
                   row.get("team_id") if row.get("kind") == UNRESERVED else None}
        grouped.append({**{name: derived[name] if name in derived else row[name]
                           for name in by},
                        **{name: row[name] for name in ("failed", "split_ways", "covered_s",
                                                        "busy_s", "util_weighted")}})
    return grouped


def days_from(windows: list, reserved: dict, busy: dict) -> list[DayUsage]:
    """The per-day figures of `windows` from reserved and busy seconds by day."""
    return [DayUsage(day=day, reserved_s=reserved.get(day, 0), busy_s=busy.get(day, Fraction(0)))
            for day, _start, _end in windows]


@dataclass
class UtilizationOverview:
    """Everything the utilization page shows for one period."""

    fleet: FleetFigures
    classes: list[tuple[GpuClass, FleetFigures]]
    fleet_days: list[DayUsage]
    class_days: list[tuple[GpuClass, list[DayUsage]]]
    unreserved: list[dict] | None  # per owner team, largest first; None: not asked


def _busy_by(rows: list[dict], key) -> dict:
    """Busy seconds inside reserved time (failed included) per key(row)."""
    busy: dict = {}
    for row in rows:
        if row["kind"] == RESERVED:
            k = key(row)
            busy[k] = busy.get(k, Fraction(0)) + Fraction(row["busy_s"], row["split_ways"])
    return busy


def _unreserved_named(rows: list[dict]) -> list[dict]:
    return owner_rows({team: sums.ok_busy_s for team, sums in sums_by(
        [r for r in rows if r["kind"] == UNRESERVED], lambda r: r["owner"]).items()
        if sums.ok_busy_s})


def utilization_overview(*, period: Period, unreserved: bool) -> UtilizationOverview:
    """The fleet and per-class figures, their reserved versus busy seconds per UTC day
    and (when asked) unreserved busy hours per owner team, for a page's period: the
    fleet's rollup rows (a few an hour, whatever the GPUs) and a fixed number of queries
    over assignments, GPUs and health."""
    rows = rollup_sums(period=period, by=("day", "gpu_class_id", "kind", "owner"), fleet=True)
    by_class = sums_by(rows, lambda r: r["gpu_class_id"])
    reserved_rows = [r for r in rows if r["kind"] == RESERVED]
    reserved_sums = sums_by(reserved_rows, lambda r: r["gpu_class_id"])
    in_service = in_service_seconds_by_class(period=period)
    failed = failed_seconds_by_class(period=period)
    windows = day_windows(period)
    reserved_days = seconds_by_day(reserved_by_class_qs(period), windows, CLASS_IN_FORCE)
    reserved = {class_id: sum(days.values()) for class_id, days in reserved_days.items()}
    failed_reserved = failed_reserved_seconds_by_class(period=period)
    busy_days = _busy_by(rows, lambda r: (r["gpu_class_id"], r["day"]))
    classes = []
    for klass in GpuClass.objects.filter(
            id__in=set(in_service) | set(by_class) | set(reserved)).order_by("name"):
        classes.append((klass, FleetFigures(
            in_service_s=in_service.get(klass.id, 0), failed_s=failed.get(klass.id, 0),
            sums=by_class.get(klass.id, Sums()),
            reserved=UsageFigures(reserved.get(klass.id, 0), failed_reserved.get(klass.id, 0),
                                  reserved_sums.get(klass.id, Sums())))))
    all_sums, all_reserved = Sums(), Sums()
    for sums in by_class.values():
        all_sums += sums
    for sums in reserved_sums.values():
        all_reserved += sums
    fleet = FleetFigures(
        in_service_s=seconds_total(in_service_qs(period)),
        failed_s=seconds_total(failed_qs(period)), sums=all_sums,
        reserved=UsageFigures(
            reserved_s=seconds_total(reserved_qs(period)),
            failed_reserved_s=seconds_total(failed_reserved_qs(period)), sums=all_reserved))
    return UtilizationOverview(
        fleet=fleet, classes=classes,
        fleet_days=days_from(windows, seconds_by_day(reserved_qs(period), windows),
                             _busy_by(rows, lambda r: r["day"])),
        class_days=[(klass, days_from(
            windows, reserved_days.get(klass.id, {}),
            {day: busy for (class_id, day), busy in busy_days.items() if class_id == klass.id}))
            for klass, _figures in classes],
        unreserved=_unreserved_named(rows) if unreserved else None,
    )
