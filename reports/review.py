"""The admin's review page of a month, on `reports.selectors.statements_review`: each
team's row with the link to its statement and whether it can be approved now, and when
approval opens. A fixed number of queries whatever the number of teams."""

from dataclasses import dataclass
from datetime import datetime

from accounts.models import Team
from gpuquota.core.timeutil import Period
from reports.models import Statement
from reports.selectors import (
    LateUsage,
    ReviewRow,
    month_before,
    statement_late_usage,
    statements_review,
)
from reports.services_statements import approval_opens


def previous_period(period: Period) -> Period:
    start = period.start
    return Period.month(start.year - (start.month == 1), (start.month - 2) % 12 + 1)


@dataclass(frozen=True)
class ReviewEntry:
    row: ReviewRow
    slug: str
    approvable: bool


@dataclass(frozen=True)
class Review:
    period: Period
    previous_period: Period
    opens_at: datetime
    open_for_approval: bool
    entries: list[ReviewEntry]

    @property
    def approvable(self) -> list[ReviewEntry]:
        return [entry for entry in self.entries if entry.approvable]

    @property
    def flagged(self) -> int:
        return sum(1 for entry in self.entries if entry.row.flags)


def review_month(*, period: Period, now: datetime) -> Review:
    """Every team's statement of `period` beside the previous month's, with flags, and
    which drafts an admin can approve now (complete drafts, once the delay has passed)."""
    rows = statements_review(period=period)
    slugs = dict(Team.objects.filter(id__in=[r.team_id for r in rows]).values_list("id", "slug"))
    opens_at = approval_opens(period)
    is_open = now >= opens_at

    def approvable(row: ReviewRow) -> bool:
        s = row.statement
        return is_open and s is not None and s.status == Statement.Status.DRAFT and not s.error

    return Review(
        period=period,
        previous_period=previous_period(period),
        opens_at=opens_at,
        open_for_approval=is_open,
        entries=[ReviewEntry(row, slugs[row.team_id], approvable(row)) for row in rows],
    )


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
