"""What the statement pages read. The admin's review of a month: every team with a
statement this month or last, side by side, with the flags that need a look and whether it
can be approved now, in a fixed number of queries (plus one pricing pass when last month is
approved, for its late usage); the late usage a statement page shows; a team's statements."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import QuerySet, Sum

from accounts.models import Team
from gpuquota.core.timeutil import Period
from reports.conf import lending_credit_share
from reports.foreign import ForeignUseCount, foreign_use_by_cluster
from reports.late_scan import late_usage_checks_pending
from reports.models import LateUsageCheck, Statement, StatementLine
from reports.selectors import LateUsage, late_usage_month, month_before, statement_late_usage
from reports.services_statements import approval_opens

CHANGE_FLAG = Fraction(1, 4)
COVERAGE_FLAG = Fraction(9, 10)

K = StatementLine.Kind


def previous_period(period: Period) -> Period:
    start = period.start
    return Period.month(start.year - (start.month == 1), (start.month - 2) % 12 + 1)


@dataclass
class ReviewRow:
    """One team on the review page: this month's statement beside the previous one."""

    team_id: int
    team_name: str
    slug: str
    statement: Statement | None = None
    previous: Statement | None = None
    late_usage: LateUsage | None = None
    earlier_late: list[LateUsageCheck] = field(default_factory=list)
    failure_credit: Decimal = Decimal("0.00")
    borrowed: Decimal = Decimal("0.00")
    lending_credit: Decimal = Decimal("0.00")
    approvable: bool = False
    #: The month is still running: its figures are to date, not a month to compare.
    in_progress: bool = False

    @property
    def change(self) -> Fraction | None:
        """Relative change of the total against the previous month (None: no base, or the
        month is in progress: a part of a month is not compared with a whole one)."""
        if (self.in_progress or self.statement is None or self.previous is None
                or not self.previous.total):
            return None
        return Fraction(self.statement.total - self.previous.total) / Fraction(self.previous.total)

    @property
    def utilization(self) -> Fraction | None:
        s = self.statement
        return Fraction(s.busy_s, s.reserved_s) if s and s.reserved_s else None

    @property
    def coverage(self) -> Fraction | None:
        s = self.statement
        return Fraction(s.covered_s, s.reserved_s) if s and s.reserved_s else None

    @property
    def flags(self) -> list[str]:
        """What needs a look: a failed draft, a change over 25 %, coverage under 90 %,
        late usage of the previous (approved) month or, as the daily scan found, of an
        earlier one."""
        flags = []
        if self.statement is not None and self.statement.error:
            flags.append(f"failed: {self.statement.error}")
        if self.change is not None and abs(self.change) > CHANGE_FLAG:
            flags.append("change over 25%")
        if self.coverage is not None and self.coverage < COVERAGE_FLAG:
            flags.append("coverage under 90%")
        if self.late_usage is not None and self.late_usage.difference:
            flags.append("late usage")
        if self.earlier_late:
            flags.append("late usage of an earlier month")
        return flags


@dataclass(frozen=True)
class Review:
    period: Period
    previous_period: Period
    opens_at: datetime
    open_for_approval: bool
    rows: list[ReviewRow]
    earlier_late: list[LateUsageCheck]
    foreign_use: list[ForeignUseCount] = field(default_factory=list)
    #: The month is running: drafts are to date, refreshed every 30 minutes.
    in_progress: bool = False

    @property
    def approvable(self) -> list[ReviewRow]:
        return [row for row in self.rows if row.approvable]

    @property
    def approvable_totals(self) -> list[tuple[str, Decimal]]:
        """What approving every approvable draft would bill, per currency."""
        totals: dict[str, Decimal] = defaultdict(Decimal)
        for row in self.approvable:
            totals[row.statement.currency] += row.statement.total
        return sorted(totals.items())

    @property
    def flagged(self) -> int:
        return sum(1 for row in self.rows if row.flags)

    @property
    def column_totals(self) -> list[dict]:
        """The table's total row, one per currency: totals this month and the month before,
        failure credits, borrowed, lending credits and late usage."""
        totals: dict[str, dict] = {}
        for row in self.rows:
            s = row.statement
            if s is None or s.error:
                continue
            t = totals.setdefault(s.currency, defaultdict(Decimal, currency=s.currency))
            t["total"] += s.total
            t["failure_credit"] += row.failure_credit
            t["borrowed"] += row.borrowed
            t["lending_credit"] += row.lending_credit
            if row.previous is not None and row.previous.currency == s.currency:
                t["previous"] += row.previous.total
            if row.late_usage is not None and row.late_usage.difference:
                t["late_usage"] += row.late_usage.difference
        return [totals[currency] for currency in sorted(totals)]


def statements_review(*, period: Period, now: datetime) -> Review:
    """Every team with a statement of `period` or of the month before, side by side, with
    failure credits, the previous month's late usage, flags, and which drafts an admin can
    approve now (complete drafts, once the settlement delay has passed); and the late usage
    of earlier months that the daily scan found, for every team."""
    month, previous_month = period.start.date(), month_before(period.start.date())
    opens_at = approval_opens(period)
    is_open = now >= opens_at
    kinds = (K.FAILURE_CREDIT, K.BORROWED, K.LENDING_CREDIT)
    sums = defaultdict(Decimal, {
        (team_id, kind): total for team_id, kind, total in
        StatementLine.objects.filter(statement__month=month, kind__in=kinds)
        .values_list("statement__team_id", "kind").annotate(total=Sum("amount")).order_by()})
    both = list(Statement.objects.filter(month__in=[month, previous_month]).order_by("-month"))
    slugs = dict(Team.objects.filter(id__in={s.team_id for s in both}).values_list("id", "slug"))
    rows: dict[int, ReviewRow] = {}
    for statement in both:
        row = rows.setdefault(
            statement.team_id,
            ReviewRow(statement.team_id, statement.team_name, slugs[statement.team_id]),
        )
        if statement.month == month:
            row.statement = statement
        else:
            row.previous = statement
    for team_id, late in late_usage_month(month=previous_month).items():
        if team_id in rows:
            rows[team_id].late_usage = late
    earlier_late = list(late_usage_checks_pending(before=previous_month))
    for check in earlier_late:
        if check.statement.team_id in rows:
            rows[check.statement.team_id].earlier_late.append(check)
    in_progress = period.start <= now < period.end
    for team_id, row in rows.items():
        row.in_progress = in_progress
        row.failure_credit, row.borrowed, row.lending_credit = (
            sums[team_id, kind] for kind in kinds)
        s = row.statement
        row.approvable = bool(is_open and s and s.status == Statement.Status.DRAFT and not s.error)
    return Review(
        period=period,
        previous_period=previous_period(period),
        opens_at=opens_at,
        open_for_approval=is_open,
        rows=sorted(rows.values(), key=lambda r: r.team_name),
        earlier_late=earlier_late,
        foreign_use=foreign_use_by_cluster(period=period),
        in_progress=in_progress,
    )


def line_kinds_explained(*, kinds: set[str]) -> list[tuple[str, str]]:
    """How each kind of line among `kinds` is priced, in the statement's order: the rate
    column's meaning, the lending credit's share of the reserved rate included."""
    share = lending_credit_share()
    texts = {
        K.RESERVED: "every reserved second × the reserved rate.",
        K.FAILURE_CREDIT: "the reserved seconds a GPU was failed × the reserved rate, "
                          "credited.",
        K.ON_DEMAND: "busy seconds outside any reservation × the on-demand rate.",
        K.BORROWED: "busy seconds on another team's lent GPU × the borrowed rate.",
        K.LENDING_CREDIT: f"borrowed busy seconds on this team's lent GPUs × its reserved "
                          f"rate × {share.normalize()} (GPUQUOTA_LENDING_CREDIT_SHARE): the "
                          "rate shown is that share of the reserved rate, credited.",
        K.ADJUSTMENT: "an amount an admin added, with its reason.",
    }
    return [(label, texts[kind]) for kind, label in K.choices if kind in kinds]


def statement_page_late_usage(*, statement: Statement) -> LateUsage | None:
    """The late usage a statement page shows: its own when it is approved or sent; for a
    draft, the previous month's (the draft is where an admin settles it)."""
    if statement.status != Statement.Status.DRAFT:
        return statement_late_usage(statement=statement)
    previous = (
        Statement.objects.filter(team_id=statement.team_id, month=month_before(statement.month))
        .exclude(status=Statement.Status.DRAFT)
        .first()
    )
    return None if previous is None else statement_late_usage(statement=previous)


def team_statements(*, team: Team, limit: int = 24) -> QuerySet[Statement]:
    """The team's statements, newest month first (the team page's statements section)."""
    return Statement.objects.filter(team=team).order_by("-month")[:limit]
