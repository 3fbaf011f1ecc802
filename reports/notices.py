"""What admins are told about a month's statements, through the one mail module: drafts
are ready (the 1st), and a reminder once the settlement delay has passed with drafts
still unapproved. Each goes once per month and admin (the mail key), and once per month
to each admins' channel that hears it (`statements.ready`, `statements.to_approve`)."""

from datetime import datetime

from django.db.models import Count, Q
from django.urls import reverse

from accounts.models import User
from gpuquota.core.timeutil import Period
from gpuquota.mail.conf import base_url
from gpuquota.mail.services import MailOutcome, mail_send
from gpuquota.outbox.render import Message, when_utc
from reports.admin_channels import admin_channels_event
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


def _tell(*, event: str, key: str, context: dict) -> None:
    failed = f", {context['failed']} failed" if context["failed"] else ""
    title = {"statements.ready": f"Statements of {context['month_name']} drafted",
             "statements.to_approve": f"Statements of {context['month_name']} to approve"}[event]
    admin_channels_event(key=key, message=Message(
        event=event, title=title,
        text=(f"{context['drafts']} draft(s){failed}, {context['approved']} approved; "
              f"approval opens {when_utc(context['opens_at'])}."),
        facts=[("Drafts", str(context["drafts"])), ("Failed", str(context["failed"])),
               ("Approved", str(context["approved"])),
               ("Approval opens", when_utc(context["opens_at"]))],
        link=base_url() + context["review_path"],
        data={"month": context["month"], "drafts": context["drafts"],
              "failed": context["failed"], "approved": context["approved"]}))


def statements_ready_notify(*, period: Period) -> MailOutcome:
    """Tell every admin that the month's drafts are ready for review (once per month)."""
    key, context = f"statements-ready:{period.start:%Y-%m}", _context(period)
    _tell(event="statements.ready", key=key, context=context)
    return mail_send(template="statements_ready", recipients=_admins(), context=context,
                     key=key)


def statements_unapproved_remind(*, period: Period, now: datetime) -> MailOutcome | None:
    """Once the month can be approved, remind every admin once if drafts are still
    unapproved; None when there is nothing to remind of yet."""
    if now < approval_opens(period):
        return None
    if not Statement.objects.filter(month=period.start.date(),
                                    status=Statement.Status.DRAFT).exists():
        return None
    key, context = f"statements-reminder:{period.start:%Y-%m}", _context(period)
    _tell(event="statements.to_approve", key=key, context=context)
    return mail_send(template="statements_reminder", recipients=_admins(), context=context,
                     key=key)


def statements_month_start(*, now: datetime) -> dict:
    """On the 1st (UTC): draft last month for every team and tell the admins."""
    period = month_previous(now)
    drafted = statements_draft_month(period=period, now=now)
    outcome = statements_ready_notify(period=period)
    return {"month": f"{period.start:%Y-%m}", "statements": len(drafted), **outcome.summary()}
