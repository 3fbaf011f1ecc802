"""What admins are told about a month's statements, through the one mail module: drafts
are ready (the 1st), and a reminder once the settlement delay has passed with drafts
still unapproved. Each goes once per month and admin (the mail key)."""

from datetime import datetime

from django.db.models import Count, Q
from django.urls import reverse

from accounts.models import User
from gpuquota.core.timeutil import Period
from gpuquota.mail.services import MailOutcome, mail_send
from reports.models import Statement
from reports.services_statements import approval_opens, month_previous, statements_draft_month


def _admins() -> list[User]:
    return list(User.objects.filter(is_active=True, is_staff=True).order_by("username"))


def _context(period: Period) -> dict:
    counts = Statement.objects.filter(month=period.start.date()).aggregate(
        drafts=Count("id", filter=Q(status=Statement.Status.DRAFT)),
        failed=Count("id", filter=Q(status=Statement.Status.DRAFT) & ~Q(error="")),
        approved=Count("id", filter=~Q(status=Statement.Status.DRAFT)))
    return {"month": f"{period.start:%Y-%m}", "month_name": f"{period.start:%B %Y}",
            "opens_at": approval_opens(period), "review_path":
            f"{reverse('statement_review')}?month={period.start:%Y-%m}", **counts}


def statements_ready_notify(*, period: Period) -> MailOutcome:
    """Tell every admin that the month's drafts are ready for review (once per month)."""
    return mail_send(template="statements_ready", recipients=_admins(), context=_context(period),
                     key=f"statements-ready:{period.start:%Y-%m}")


def statements_unapproved_remind(*, period: Period, now: datetime) -> MailOutcome | None:
    """Once the month can be approved, remind every admin once if drafts are still
    unapproved; None when there is nothing to remind of yet."""
    if now < approval_opens(period):
        return None
    if not Statement.objects.filter(month=period.start.date(),
                                    status=Statement.Status.DRAFT).exists():
        return None
    return mail_send(template="statements_reminder", recipients=_admins(),
                     context=_context(period), key=f"statements-reminder:{period.start:%Y-%m}")


def statements_month_start(*, now: datetime) -> dict:
    """On the 1st (UTC): draft last month for every team and tell the admins."""
    period = month_previous(now)
    drafted = statements_draft_month(period=period, now=now)
    outcome = statements_ready_notify(period=period)
    return {"month": f"{period.start:%Y-%m}", "statements": len(drafted), **outcome.summary()}
