"""The per-day usage a statement's PDF charts: read live for a draft, frozen in the
statement at approval (`Statement.daily_usage`), like its lines, so an approved month's
PDF never moves with late or re-attributed usage."""

from datetime import date
from fractions import Fraction

from gpuquota.core.timeutil import Period
from gpuquota.usage.daily import DayUsage, daily_usage
from reports.models import Statement


def _covered(statement: Statement) -> Period:
    return Period(Period.parse_month(statement.period_label).start, statement.computed_until)


def daily_usage_snapshot(statement: Statement) -> list[dict]:
    """The statement's per-day usage as it is now, in the JSON the statement keeps."""
    return [{"day": day.day.isoformat(), "reserved_s": day.reserved_s, "busy_s": str(day.busy_s)}
            for day in daily_usage(period=_covered(statement), team=statement.team)]


def statement_daily_usage(statement: Statement) -> list[DayUsage]:
    """The per-day usage of the statement's chart: its frozen snapshot once approved, the
    usage as it is now for a draft (or a statement approved before snapshots existed)."""
    if statement.daily_usage is None:
        return daily_usage(period=_covered(statement), team=statement.team)
    return [DayUsage(day=date.fromisoformat(row["day"]), reserved_s=row["reserved_s"],
                     busy_s=Fraction(row["busy_s"])) for row in statement.daily_usage]
