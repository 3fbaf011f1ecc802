"""A team's figures for any month: reserved versus busy per reservation and per UTC day,
and the trend over the months before it (accounting.md, Utilization versus allocation).
Every figure comes from the selectors in `selectors` and `daily`; the query count depends
on the number of months shown, never on the number of GPUs or reservations."""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from accounts.models import Team
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.usage.charts import svg_reserved_busy_chart
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.figures import UsageFigures
from gpuquota.usage.selectors import period_to_date, team_reservations_utilization, team_utilization

TREND_MONTHS = 6


def month_of(*, text: str | None, now: datetime) -> Period:
    """The calendar month named `YYYY-MM` (default: the current one); a month that has
    not begun is refused: it has no figures yet."""
    current = Period.month(now.year, now.month)
    if not text:
        return current
    try:
        month = Period.parse_month(text)
    except ValueError as exc:
        raise DomainError("Pick a month as YYYY-MM, e.g. 2026-11.", field="month") from exc
    if month.start > current.start:
        raise DomainError(f"{month.start:%B %Y} has not begun: it has no figures yet.",
                          field="month")
    return month


def month_shift(month: Period, delta: int) -> Period:
    index = month.start.year * 12 + month.start.month - 1 + delta
    return Period.month(index // 12, index % 12 + 1)


@dataclass
class MonthFigures:
    month: Period
    period: Period  # the month to date
    figures: UsageFigures


def team_trend(*, team: Team, last: Period, now: datetime,
               months: int = TREND_MONTHS) -> list[MonthFigures]:
    """The team's reserved versus busy figures for `months` months ending with `last`
    (each to date), oldest first."""
    rows = []
    for back in range(months - 1, -1, -1):
        month = month_shift(last, -back)
        period = period_to_date(month, now)
        rows.append(MonthFigures(month, period, team_utilization(team=team, period=period)))
    return rows


def team_month_context(*, team: Team, month: Period, now: datetime | None = None) -> dict:
    """What the team page's figures section shows for `month` (to date)."""
    now = now or timezone.now()
    period = period_to_date(month, now)
    days = daily_usage(period=period, team=team)
    trend = team_trend(team=team, last=month, now=now)
    return {
        "usage_month": month, "usage_period": period,
        "usage_month_prev": month_shift(month, -1),
        "usage_month_next": month_shift(month, 1) if month.end <= now else None,
        "reservation_usage": team_reservations_utilization(team=team, period=period),
        "daily_usage": days,
        "daily_chart": svg_reserved_busy_chart(
            days=days, title=f"Reserved versus busy GPU-hours per day, {month.start:%B %Y}"),
        "trend": trend, "trend_peak_s": max([t.figures.reserved_s for t in trend] + [1]),
    }
