"""What the statement pages read. The admin's review of a month: every team's statement
beside the previous month's, with the flags that need a look, in a fixed number of queries
whatever the number of teams; and a team's list of statements."""

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.db.models import Sum

from accounts.models import Team
from gpuquota.core.timeutil import Period
from reports.models import Statement, StatementLine
from reports.services_statements import approval_opens

CHANGE_FLAG_RATIO = Decimal("0.25")
COVERAGE_FLAG_RATIO = Decimal("0.90")


def month_of(period: Period) -> date:
    return period.start.date()


def previous_period(period: Period) -> Period:
    start = period.start
    return Period.month(start.year - (start.month == 1), (start.month - 2) % 12 + 1)


def ratio(numerator: int, denominator: int) -> Decimal | None:
    """numerator / denominator as a Decimal, None when nothing is reserved."""
    if not denominator:
        return None
    return Decimal(numerator) / Decimal(denominator)


@dataclass
class ReviewRow:
    """One team's line on the review page."""

    team: Team
    statement: Statement | None
    previous: Statement | None
    failure_credits: Decimal = Decimal("0.00")
    late_usage: Decimal = Decimal("0.00")
    flags: list[str] = field(default_factory=list)
    approvable: bool = False

    @property
    def change(self) -> Decimal | None:
        """(total − previous total) / |previous total|; None without a comparable previous."""
        if self.statement is None or self.previous is None or not self.previous.total:
            return None
        return (self.statement.total - self.previous.total) / abs(self.previous.total)

    @property
    def utilization(self) -> Decimal | None:
        s = self.statement
        return None if s is None else ratio(s.busy_s, s.reserved_s)

    @property
    def coverage(self) -> Decimal | None:
        s = self.statement
        return None if s is None else ratio(s.covered_s, s.reserved_s)


@dataclass
class Review:
    period: Period
    previous_period: Period
    opens_at: datetime
    open_for_approval: bool
    rows: list[ReviewRow]

    @property
    def approvable(self) -> list[ReviewRow]:
        return [row for row in self.rows if row.approvable]

    @property
    def flagged(self) -> int:
        return sum(1 for row in self.rows if row.flags)


def _flags(row: ReviewRow) -> list[str]:
    s = row.statement
    if s is None:
        return [
            f"no statement this month (last month {row.previous.total} {row.previous.currency})"
        ]
    flags = []
    if s.error:
        flags.append(f"draft failed: {s.error}")
    change = row.change
    if change is not None and abs(change) > CHANGE_FLAG_RATIO:
        flags.append(f"total changed {change * 100:+.0f}% from last month")
    elif change is None and row.previous is not None and s.total:
        flags.append("charges where last month had none")
    if row.coverage is not None and row.coverage < COVERAGE_FLAG_RATIO:
        flags.append(f"coverage {row.coverage * 100:.1f}% (under 90%)")
    if row.late_usage:
        flags.append("late usage for an approved month")
    return flags


def statements_review(*, period: Period, now: datetime, late_usage: dict | None = None) -> Review:
    """Every team's statement for `period` beside its previous month's, failure credits,
    flags and whether it can be approved now. `late_usage` maps team id to the amount by
    which data that arrived after approval would change an earlier month."""
    late_usage = late_usage or {}
    before = previous_period(period)
    months = [month_of(period), month_of(before)]
    statements = {
        (s.team_id, s.month): s
        for s in Statement.objects.filter(month__in=months).select_related("approved_by")
    }
    credits = dict(
        StatementLine.objects.filter(
            statement__month=months[0], kind=StatementLine.Kind.FAILURE_CREDIT
        )
        .values_list("statement__team_id")
        .annotate(total=Sum("amount"))
    )
    opens_at = approval_opens(period)
    is_open = now >= opens_at
    team_ids = {team_id for team_id, _month in statements}
    rows = []
    for team in Team.objects.filter(id__in=team_ids).order_by("name"):
        row = ReviewRow(
            team=team,
            statement=statements.get((team.pk, months[0])),
            previous=statements.get((team.pk, months[1])),
            failure_credits=credits.get(team.pk, Decimal("0.00")),
            late_usage=late_usage.get(team.pk, Decimal("0.00")),
        )
        row.flags = _flags(row)
        s = row.statement
        row.approvable = bool(
            is_open and s is not None and s.status == Statement.Status.DRAFT and not s.error
        )
        rows.append(row)
    return Review(
        period=period,
        previous_period=before,
        opens_at=opens_at,
        open_for_approval=is_open,
        rows=rows,
    )


def team_statements(*, team: Team, limit: int = 24) -> list[Statement]:
    """The team's statements, newest month first (the team page's statements section)."""
    return list(Statement.objects.filter(team=team).order_by("-month")[:limit])
