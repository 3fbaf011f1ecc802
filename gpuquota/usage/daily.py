"""Reserved versus busy GPU-seconds per UTC day (accounting.md, Utilization versus
allocation): the per-day chart of the team and utilization pages and the statement PDF.

Reserved seconds come from assignments ∩ charged window ∩ day, one SQL aggregate for all
days; busy seconds inside reserved assignments from the hourly rollups grouped by day
(one SQL aggregate), plus the period's partial edge hours computed from the samples by
the same rule. The query count does not depend on the number of GPUs, reservations or
days (beyond the two edge hours).
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Greatest, Least, TruncDate

from accounts.models import Team
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuClass
from gpuquota.usage.figures import display_decimal
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import RESERVED
from gpuquota.usage.seconds import reserved_in_class_qs, reserved_qs
from gpuquota.usage.selectors import _assigned_gpu_ids, _split, usage_rows

DAY, SECOND = timedelta(days=1), timedelta(seconds=1)


@dataclass
class DayUsage:
    """One UTC day of a period (clipped to it): reserved seconds and the busy seconds
    inside them (failed time included, as in `UsageFigures`)."""

    day: date
    reserved_s: int
    busy_s: Fraction

    @property
    def reserved_hours(self) -> Decimal:
        return display_decimal(Fraction(self.reserved_s, 3600))

    @property
    def busy_hours(self) -> Decimal:
        return display_decimal(self.busy_s / 3600)

    @property
    def utilization(self) -> Fraction | None:
        """busy / reserved; None when nothing was reserved that day."""
        return self.busy_s / self.reserved_s if self.reserved_s else None


def day_windows(period: Period) -> list[tuple[date, datetime, datetime]]:
    """(day, start, end) for every UTC day the period touches, clipped to the period."""
    windows = []
    day_start = period.start.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    while day_start < period.end:
        start, end = max(day_start, period.start), min(day_start + DAY, period.end)
        if start < end:
            windows.append((day_start.date(), start, end))
        day_start += DAY
    return windows


def _seconds_in(start: datetime, end: datetime) -> Case:
    """Seconds of an annotated row's [_lo, _hi) inside [start, end), else NULL."""
    return Case(
        When(_lo__lt=end, _hi__gt=start, then=ExpressionWrapper(
            Least(F("_hi"), Value(end)) - Greatest(F("_lo"), Value(start)),
            output_field=DurationField())),
        output_field=DurationField(),
    )


def seconds_by_window(queryset: QuerySet, windows: list, group: str | None = None) -> dict:
    """Seconds of annotated rows (`seconds_annotate`) inside each (key, start, end) of
    `windows`, in one query: {key: int}, or {group value: {key: int}} grouped by a field."""
    sums = {f"d{i}": Sum(_seconds_in(start, end)) for i, (_key, start, end) in enumerate(windows)}
    rows = [queryset.aggregate(**sums)] if group is None else \
        queryset.values(group).annotate(**sums).order_by()

    def seconds(row: dict) -> dict:
        return {key: int(row[f"d{i}"].total_seconds()) if row[f"d{i}"] else 0
                for i, (key, _start, _end) in enumerate(windows)}
    if group is None:
        return seconds(rows[0])
    return {row[group]: seconds(row) for row in rows}


def seconds_by_day(queryset: QuerySet, windows: list, group: str | None = None) -> dict:
    """`seconds_by_window` for the contiguous UTC days of `day_windows`, in one query
    whose work does not grow with the days (issue 34: a month's last day summed 31
    clipped intervals per row). The rows are grouped by the days their two ends fall on;
    the seconds before an instant t are Σ min(_hi, t) − min(_lo, t), and Σ min(x, t) over
    the ends is the sum of the ends on the days before t's plus t for each end after."""
    if not windows:
        return {}
    origin = windows[0][1]

    def since_origin(field: str) -> ExpressionWrapper:
        return ExpressionWrapper(F(field) - Value(origin), output_field=DurationField())
    rows = (queryset.annotate(lo_day=TruncDate("_lo", tzinfo=UTC),
                              hi_day=TruncDate("_hi", tzinfo=UTC))
            .values(*([group] if group else []), "lo_day", "hi_day")
            .annotate(rows=Count("*"), lo_sum=Sum(since_origin("_lo")),
                      hi_sum=Sum(since_origin("_hi"))).order_by())
    index = {day: k for k, (day, _start, _end) in enumerate(windows)}
    edges = [start - origin for _day, start, _end in windows] + [windows[-1][2] - origin]
    ends: dict = {}
    for row in rows:
        lo, hi = ends.setdefault(row.get(group), (_Ends(len(edges)), _Ends(len(edges))))
        lo.add(index.get(row["lo_day"], len(windows)), row["rows"], row["lo_sum"])
        hi.add(index.get(row["hi_day"], len(windows)), row["rows"], row["hi_sum"])

    def seconds(lo: _Ends, hi: _Ends) -> dict:
        before = [hi_t - lo_t for hi_t, lo_t in zip(hi.below(edges), lo.below(edges),
                                                     strict=True)]
        return {day: (before[k + 1] - before[k]) // SECOND
                for k, (day, _start, _end) in enumerate(windows)}
    if group is None:
        return seconds(*ends[None]) if ends else {day: 0 for day, _s, _e in windows}
    return {key: seconds(lo, hi) for key, (lo, hi) in ends.items()}


class _Ends:
    """Interval ends (as time since the first day's start) counted and summed per day."""

    def __init__(self, days: int) -> None:
        self.count = [0] * days
        self.total = [timedelta(0)] * days

    def add(self, day: int, count: int, total: timedelta) -> None:
        self.count[day] += count
        self.total[day] += total

    def below(self, edges: list[timedelta]) -> list[timedelta]:
        """Σ min(end, edge) for each edge: the ends of the days before the edge's as they
        are, the others as the edge."""
        sums, before, after = [], timedelta(0), sum(self.count)
        for k, edge in enumerate(edges):
            sums.append(before + edge * after)
            before += self.total[k]
            after -= self.count[k]
        return sums


def _reserved_qs(period: Period, team: Team | None, gpu_class: GpuClass | None) -> QuerySet:
    filters = {"reservation__team": team} if team else {}
    if gpu_class is None:
        return reserved_qs(period, **filters)
    return reserved_in_class_qs(period, gpu_class=gpu_class, **filters)


def _busy_by_day(period: Period, team: Team | None,
                 gpu_class: GpuClass | None) -> dict[date, Fraction]:
    row_filters = {"kind": RESERVED}
    if team:
        row_filters["team_id"] = team.id
    if gpu_class:
        row_filters["gpu_class_id"] = gpu_class.id
    hours, edges = _split(period)
    busy: dict[date, Fraction] = {}
    if hours is not None:
        rows = (GpuHourUsage.objects.filter(hour__gte=hours[0], hour__lt=hours[1], **row_filters)
                .annotate(day=TruncDate("hour", tzinfo=UTC)).values("day")
                .annotate(busy=Sum("busy_s")).order_by())
        for row in rows:
            busy[row["day"]] = busy.get(row["day"], Fraction(0)) + Fraction(row["busy"] or 0)
    edge_ids = _assigned_gpu_ids(**({"reservation__team": team} if team else {}))
    for start, end in edges:  # each within one hour, so within one day
        rows = usage_rows(period=Period(start, end), edge_gpu_ids=edge_ids, **row_filters)
        day = start.astimezone(UTC).date()
        busy[day] = busy.get(day, Fraction(0)) + sum(
            (Fraction(r["busy_s"], r["split_ways"]) for r in rows), Fraction(0))
    return busy


def daily_usage(*, period: Period, team: Team | None = None,
                gpu_class: GpuClass | None = None) -> list[DayUsage]:
    """Reserved and busy-inside-reserved GPU-seconds for every UTC day of `period` (days
    with nothing are zeros), for one team, one class (the class in force at each second),
    both, or the fleet; exact, and equal in sum to `team_utilization` and to the class
    figures of `classes_utilization`."""
    windows = day_windows(period)
    if not windows:
        return []
    reserved = seconds_by_day(_reserved_qs(period, team, gpu_class), windows)
    busy = _busy_by_day(period, team, gpu_class)
    return [DayUsage(day=day, reserved_s=reserved[day], busy_s=busy.get(day, Fraction(0)))
            for day, _start, _end in windows]
