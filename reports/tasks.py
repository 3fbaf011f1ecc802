"""Celery tasks of the reports app: thin, named, idempotent."""

import logging

from celery import shared_task
from celery.schedules import crontab
from django.utils import timezone

from gpuquota.core.errors import Conflict
from reports.channels import channels_send_due
from reports.conf import statement_send_sweep_s
from reports.hour_budgets import all_budgets_check
from reports.late_scan import late_usage_scan
from reports.models import Statement
from reports.notices import statements_month_start, statements_unapproved_remind
from reports.sending import statement_send, statements_send_due_ids
from reports.services_statements import month_previous, statements_refresh_open

logger = logging.getLogger(__name__)


@shared_task(name="reports.statement_send", acks_late=True)
def statement_send_task(statement_id: int) -> dict:
    """Mail an approved statement to its team's leads, once each. It does not retry: a lead
    not served (SMTP down, the worker killed) is in the mail records, and the
    `reports.statements_send_pending` sweep starts the sending again with backoff. A
    statement already sent, or no longer there, is left alone."""
    statement = Statement.objects.filter(pk=statement_id, status=Statement.Status.APPROVED).first()
    if statement is None:
        return {"statement": statement_id, "skipped": "not approved or already sent"}
    try:
        outcome = statement_send(statement=statement)
    except Conflict as exc:
        logger.warning("statement %s not sent: %s", statement_id, exc.message)
        return {"statement": statement_id, "skipped": exc.message}
    if outcome.failed:
        logger.warning("statement %s: %d lead(s) not served yet; the sweep retries them",
                       statement_id, len(outcome.failed))
    return {"statement": statement_id, **outcome.summary()}


@shared_task(name="reports.statements_send_pending")
def statements_send_pending_task() -> dict:
    """Queue the sending of every approved statement that is due (`statements_send_due_ids`:
    never begun, interrupted, or failed and past its backoff). A queued send expires after a
    minute (or one sweep interval if longer), so a worker that is down does not come back
    to a pile of them."""
    ids = statements_send_due_ids(now=timezone.now())
    for statement_id in ids:
        statement_send_task.apply_async((statement_id,),
                                        expires=max(statement_send_sweep_s(), 60))
    return {"queued": ids}


@shared_task(name="reports.statements_month_start", autoretry_for=(Exception,),
             retry_backoff=True, max_retries=5)
def statements_month_start_task() -> dict:
    """The 1st (UTC): draft last month's statements and tell the admins (mailed once per
    month and admin, so a retry or a second run mails nobody twice)."""
    return statements_month_start(now=timezone.now())


@shared_task(name="reports.statements_remind_unapproved", autoretry_for=(Exception,),
             retry_backoff=True, max_retries=3)
def statements_remind_unapproved_task() -> dict:
    """Once last month can be approved, remind the admins once of drafts left."""
    now = timezone.now()
    outcome = statements_unapproved_remind(period=month_previous(now), now=now)
    return {"reminded": False} if outcome is None else {"reminded": True, **outcome.summary()}


@shared_task(name="reports.statements_refresh_open", autoretry_for=(Exception,),
             retry_backoff=True, max_retries=3)
def statements_refresh_open_task() -> dict[str, int]:
    """Recompute the open drafts (this month to date, last month until approved)."""
    return statements_refresh_open()


@shared_task(name="reports.late_usage_scan", autoretry_for=(Exception,), retry_backoff=True,
             max_retries=3)
def late_usage_scan_task() -> dict[str, int]:
    """Price the approved months of the last year again for their late usage (daily)."""
    return late_usage_scan()


@shared_task(name="reports.budgets_check", autoretry_for=(Exception,), retry_backoff=True,
             max_retries=3)
def budgets_check_task() -> dict:
    """Fire the budget thresholds crossed this month (each once per team and month), of
    the money budgets and of the GPU-hour budgets per class."""
    money, class_hours = all_budgets_check()
    return {"fired": [alert.pk for alert in money],
            "fired_class_hours": [alert.pk for alert in class_hours]}


@shared_task(name="reports.channels_send_due")
def channels_send_due_task() -> dict:
    """Deliver the notification outbox's due rows (backoff and giving up are in the rows:
    the task itself never retries)."""
    outcome = channels_send_due()
    return {"sent": len(outcome.sent), "failed": len(outcome.failed),
            "given_up": len(outcome.given_up)}


BEAT_SCHEDULE = {
    "budgets-check": {
        "task": "reports.budgets_check",
        "schedule": crontab(minute=25),
    },
    "channels-send-due": {
        "task": "reports.channels_send_due",
        "schedule": 60.0,
        "options": {"expires": 55},
    },
    "statements-send-pending": {
        "task": "reports.statements_send_pending",
        "schedule": statement_send_sweep_s(),
        "options": {"expires": max(statement_send_sweep_s() - 5, 5)},
    },
    "statements-month-start": {
        "task": "reports.statements_month_start",
        "schedule": crontab(minute=15, hour=0, day_of_month=1),
    },
    "statements-remind-unapproved": {
        "task": "reports.statements_remind_unapproved",
        "schedule": crontab(minute=20),
    },
    "statements-refresh-open": {
        "task": "reports.statements_refresh_open",
        "schedule": crontab(minute="*/30"),
    },
    "late-usage-scan": {
        "task": "reports.late_usage_scan",
        "schedule": crontab(minute=40, hour=3),
    },
}
