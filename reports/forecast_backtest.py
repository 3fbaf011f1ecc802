"""The forecast's backtest (docs/budgets.md): for a month whose data is in the database,
forecast each team's month end as of every midnight of the month, knowing only the
reservations requested by then and the usage before then, and compare with what the month
actually cost (its draft, priced now). The error of a day is the mean, over the teams with a
non-zero month, of |forecast − actual| ÷ |actual|."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

from gpuquota.core.timeutil import Period
from reports.forecast import forecasts
from reports.pricing import team_drafts


@dataclass(frozen=True)
class BacktestDay:
    day: int
    teams: int
    mean_abs_error: Fraction  # a ratio: 0.05 is 5 %
    max_abs_error: Fraction


def forecast_backtest(*, month: Period, team_ids: list[int] | None = None,
                      all_booked: bool = False
                      ) -> tuple[dict[int, Decimal], list[BacktestDay]]:
    """(actual total per team, the error of each day of the month from day 1 on).
    `all_booked`: every reservation of the month counts as booked from its first day, for
    data whose reservations were recorded after the fact (a back-filled history, the demo),
    whose `requested_at` says nothing of when they were booked."""
    actual = {team_id: draft.total for team_id, draft in
              team_drafts(period=month, month=month.start.date(), team_ids=team_ids).items()
              if draft.total}
    days = []
    now, day = month.start + timedelta(days=1), 1
    while now < month.end:
        predicted = forecasts(now=now, team_ids=list(actual),
                              booked_by=None if all_booked else now)
        errors = [abs(Fraction(predicted[t].total if t in predicted else 0) - Fraction(total))
                  / abs(Fraction(total)) for t, total in actual.items()]
        if errors:
            days.append(BacktestDay(day=day, teams=len(errors),
                                    mean_abs_error=sum(errors) / len(errors),
                                    max_abs_error=max(errors)))
        now, day = now + timedelta(days=1), day + 1
    return actual, days
