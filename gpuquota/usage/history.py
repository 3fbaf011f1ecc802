"""A team's figures for any month: reserved versus busy per reservation and per UTC day,
and the trend over the months before it (accounting.md, Utilization versus allocation).
Busy and covered time comes from the hourly rollups (`to_date`: one grouped query for
the month, one for the months before it); reserved time from assignments. The query
count depends neither on the number of GPUs, reservations or days nor on the months."""

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from django.db.models import Max
from django.utils import timezone

from accounts.models import Team
from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.charts import svg_reserved_busy_chart
from gpuquota.usage.daily import day_windows, seconds_by_day, seconds_by_window
from gpuquota.usage.figures import Sums, UsageFigures, sums_by
from gpuquota.usage.freshness import usage_freshness
from gpuquota.usage.lent import lent_busy_fold, lent_gpu_ids, lent_seconds
from gpuquota.usage.rollup import BORROWED, RESERVED
from gpuquota.usage.seconds import failed_reserved_qs, reserved_qs, seconds_total
from gpuquota.usage.selectors import ReservationUsage, period_to_date
from gpuquota.usage.to_date import days_from, rollup_sums

TREND_MONTHS = 6


def month_shift(month: Period, delta: int) -> Period:
    index = month.start.year * 12 + month.start.month - 1 + delta
    return Period.month(index // 12, index % 12 + 1)


@dataclass
class MonthFigures:
    month: Period
    period: Period  # the month to date
    figures: UsageFigures


def _team_reservations(team: Team, period: Period, rows: list[dict]) -> list[ReservationUsage]:
    """Per reservation of the team overlapping the period: reserved versus busy, the
    busy side from `rows` (rollup sums by reservation)."""
    reserved = seconds_total(reserved_qs(period, reservation__team=team), "reservation_id")
    failed = seconds_total(failed_reserved_qs(period, reservation__team=team), "reservation_id")
    sums = sums_by(rows, lambda r: r["reservation_id"])
    ids = set(reserved) | set(sums) | set(
        Assignment.objects.filter(reservation__team=team, assigned_from__lt=period.end,
                                  assigned_until__gt=period.start)
        .values_list("reservation_id", flat=True))
    reservations = Reservation.objects.filter(id__in=ids).select_related("gpu_class").annotate(
        effective_end=Max("assignments__assigned_until"))
    result = [ReservationUsage(r, UsageFigures(reserved.get(r.id, 0), failed.get(r.id, 0),
                                               sums.get(r.id, Sums())))
              for r in sorted(reservations, key=lambda r: (r.start, r.id))]
    lent = lent_seconds(period=period, assignment__reservation__team=team)
    busy = _lent_busy_to_date(period, set(lent))
    for row in result:
        row.figures.lent_s = lent.get(row.reservation.id, 0)
        row.figures.lent_busy_s = busy.get(row.reservation.id, Fraction(0))
    return result


def _lent_busy_to_date(period: Period, reservation_ids: set[int]) -> dict[int, Fraction]:
    """Borrowed busy seconds per reservation (`selectors.lent_busy_seconds`) read from the
    rollups like the page's other figures (the open hour as last computed), not from the
    open hour's raw samples of the lent GPUs on each request (issue 34: that read every
    team's Slurm accounts to attribute them)."""
    if not reservation_ids:
        return {}
    gpu_ids = lent_gpu_ids(reservation_ids=reservation_ids)(period.start, period.end)
    return lent_busy_fold(rollup_sums(
        period=period, by=("reservation_id",), kind=BORROWED, failed=False,
        gpu_id__in=gpu_ids, reservation_id__in=reservation_ids), reservation_ids)


def team_trend(*, team: Team, last: Period, now: datetime, last_figures: UsageFigures,
               months: int = TREND_MONTHS) -> list[MonthFigures]:
    """The team's reserved versus busy figures for `months` months ending with `last`
    (each to date), oldest first; `last`'s own figures are given (the page has them).
    Three queries whatever the number of months."""
    shown = [month_shift(last, -back) for back in range(months - 1, -1, -1)]
    periods = [period_to_date(month, now) for month in shown]
    span = Period(periods[0].start, periods[-1].end)
    windows = [(p, p.start, p.end) for p in periods[:-1]]
    reserved = seconds_by_window(reserved_qs(span, reservation__team=team), windows) \
        if windows else {}
    failed = seconds_by_window(failed_reserved_qs(span, reservation__team=team), windows) \
        if windows else {}
    rows = rollup_sums(period=Period(span.start, last.start), by=("month",), kind=RESERVED,
                       team_id=team.id) if windows else []
    busy = sums_by(rows, lambda r: (r["month"].year, r["month"].month))
    trend = [MonthFigures(month, period, UsageFigures(
        reserved[period], failed[period], busy.get((month.start.year, month.start.month),
                                                   Sums())))
        for month, period in zip(shown[:-1], periods[:-1], strict=True)]
    return [*trend, MonthFigures(last, periods[-1], last_figures)]


def team_month_context(*, team: Team, month: Period, now: datetime | None = None) -> dict:
    """What the team page's figures section shows for `month` (to date), read from the
    rollups (`to_date`: the open hour as last computed). A fixed number of queries."""
    now = now or timezone.now()
    period = period_to_date(month, now)
    rows = rollup_sums(period=period, by=("day", "reservation_id"), kind=RESERVED,
                       team_id=team.id)
    reservation_usage = _team_reservations(team, period, rows)
    month_figures = UsageFigures(
        reserved_s=sum(ru.figures.reserved_s for ru in reservation_usage),
        failed_reserved_s=sum(ru.figures.failed_reserved_s for ru in reservation_usage),
        sums=sums_by(rows, lambda r: None).get(None, Sums()),
        lent_s=sum(ru.figures.lent_s for ru in reservation_usage),
        lent_busy_s=sum((ru.figures.lent_busy_s for ru in reservation_usage), Fraction(0)))
    windows = day_windows(period)
    busy: dict = {}
    for row in rows:
        busy[row["day"]] = busy.get(row["day"], Fraction(0)) + Fraction(row["busy_s"],
                                                                        row["split_ways"])
    days = days_from(windows, seconds_by_day(reserved_qs(period, reservation__team=team),
                                             windows), busy)
    trend = team_trend(team=team, last=month, now=now, last_figures=month_figures)
    return {
        "usage_month": month, "usage_period": period,
        "usage_month_prev": month_shift(month, -1),
        "usage_month_next": month_shift(month, 1) if month.end <= now else None,
        "usage_freshness": usage_freshness(since=month.start, until=month.end, now=now),
        "reservation_usage": reservation_usage, "usage_month_figures": month_figures,
        "daily_usage": days,
        "daily_chart": svg_reserved_busy_chart(
            days=days, title=f"Reserved versus busy GPU-hours per day, {month.start:%B %Y}"),
        "trend": trend, "trend_peak_s": max([t.figures.reserved_s for t in trend] + [1]),
    }
