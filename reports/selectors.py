"""Reads of statements: who sees which, and late usage of approved months (accounting.md,
Closing a period). The review page's reads are in `reports/review.py`."""

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from django.db.models import Prefetch, QuerySet, Sum

from accounts.models import User
from accounts.selectors import teams_billed_visible
from gpuquota.core.timeutil import Period
from reports.models import Statement, StatementLine
from reports.pricing import TeamDraft, team_drafts

S = Statement.Status


def month_before(month: date) -> date:
    """The first day of the month before `month`."""
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def month_after(month: date) -> date:
    """The first day of the month after `month`."""
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)
ADJUSTMENT = StatementLine.Kind.ADJUSTMENT


def statements_visible(*, user: User, month: date | None = None) -> QuerySet[Statement]:
    """Statements of the teams the user may read (all for admins and finance), lines
    prefetched."""
    lines = Prefetch("lines", queryset=StatementLine.objects.order_by("position"))
    qs = Statement.objects.filter(team__in=teams_billed_visible(user=user)).prefetch_related(lines)
    return qs.filter(month=month) if month else qs


@dataclass
class LateLine:
    """One line of an approved month: as approved, and as the data now says."""

    kind: str
    gpu_class_name: str
    rate: Decimal | None
    approved_seconds: int = 0
    now_seconds: int = 0
    approved_amount: Decimal = Decimal("0.00")
    now_amount: Decimal = Decimal("0.00")

    @property
    def seconds_difference(self) -> int:
        return self.now_seconds - self.approved_seconds

    @property
    def difference(self) -> Decimal:
        return self.now_amount - self.approved_amount


@dataclass
class LateUsage:
    """What an approved statement would now say, line by line (adjustments left out), and
    what remains to settle after the late-usage adjustments already made for it."""

    statement: Statement
    lines: list[LateLine] = field(default_factory=list)
    settled: Decimal = Decimal("0.00")
    errors: list[str] = field(default_factory=list)

    @property
    def changed_lines(self) -> list[LateLine]:
        return [line for line in self.lines
                if line.seconds_difference or line.difference]

    @property
    def difference(self) -> Decimal:
        """The amount still to settle by an adjustment (0: nothing late)."""
        return sum((line.difference for line in self.lines), Decimal("0.00")) - self.settled


def _late_usage(statement: Statement, draft: TeamDraft, settled: Decimal) -> LateUsage:
    by_key: dict[tuple, LateLine] = {}

    def slot(kind, class_name, rate) -> LateLine:
        return by_key.setdefault((kind, class_name, rate), LateLine(kind, class_name, rate))

    for line in statement.lines.all():
        if line.kind != ADJUSTMENT:
            entry = slot(line.kind, line.gpu_class_name, line.rate)
            entry.approved_seconds, entry.approved_amount = line.seconds, line.amount
    for line in draft.lines:
        if line.kind != ADJUSTMENT:
            entry = slot(line.kind, line.gpu_class_name, line.rate)
            entry.now_seconds, entry.now_amount = line.seconds, line.amount
    return LateUsage(statement, list(by_key.values()), settled, list(draft.errors))


def late_usage_month(*, month: date) -> dict[int, LateUsage]:
    """Late usage of every approved or sent statement of `month`, per team id: one
    pricing pass for all of them."""
    lines = Prefetch("lines", queryset=StatementLine.objects.order_by("position"))
    closed = list(Statement.objects.filter(month=month).exclude(status=S.DRAFT)
                  .prefetch_related(lines))
    if not closed:
        return {}
    period = Period.month(month.year, month.month)
    drafts = team_drafts(period=period, month=month, team_ids=[s.team_id for s in closed])
    settled = dict(
        Statement.objects.filter(pk__in=[s.pk for s in closed])
        .annotate(settled=Sum("late_adjustments__amount")).values_list("pk", "settled"))
    return {s.team_id: _late_usage(s, drafts.get(s.team_id) or TeamDraft(s.team_id),
                                   settled.get(s.pk) or Decimal("0.00"))
            for s in closed}


def statement_late_usage(*, statement: Statement) -> LateUsage | None:
    """Late usage of one approved or sent statement (None for a draft)."""
    if statement.status == S.DRAFT:
        return None
    period = Period.month(statement.month.year, statement.month.month)
    draft = team_drafts(period=period, month=statement.month,
                        team_ids=[statement.team_id]).get(statement.team_id)
    settled = statement.late_adjustments.aggregate(total=Sum("amount"))["total"]
    return _late_usage(statement, draft or TeamDraft(statement.team_id),
                       settled or Decimal("0.00"))
