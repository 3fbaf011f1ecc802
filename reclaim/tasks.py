"""Celery tasks of reclaim: thin, named, idempotent, retried."""

from celery import shared_task
from django.utils.dateparse import parse_datetime

from gpuquota.core.retry import DB_RETRY
from gpuquota.mail.conf import mail_enabled
from reclaim.conf import evaluate_interval_s, release_interval_s
from reclaim.lifecycle import recommendations_release_due
from reclaim.notify import notices_pending, recommendation_notify
from reclaim.services import recommendations_evaluate

BEAT_SCHEDULE = {
    "reclaim-evaluate": {
        "task": "reclaim.evaluate",
        "schedule": evaluate_interval_s(),
        "options": {"expires": max(evaluate_interval_s() / 2, 60)},
    },
    "reclaim-release-due": {
        "task": "reclaim.release_due",
        "schedule": release_interval_s(),
        "options": {"expires": max(release_interval_s() * 2, 60)},
    },
}


@shared_task(name="reclaim.evaluate", **DB_RETRY)
def evaluate_task(now: str | None = None) -> dict:
    """Evaluate every eligible reservation against the policy in force (at `now`, ISO
    8601, when given: a replay or a test's frozen clock)."""
    return recommendations_evaluate(now=parse_datetime(now) if now else None)


@shared_task(name="reclaim.release_due", **DB_RETRY)
def release_due_task(now: str | None = None) -> dict:
    """Release the accepted recommendations whose grace ended (by `now`, ISO 8601, when
    given), then send the notices an earlier run or an outage left unsent."""
    counts = recommendations_release_due(now=parse_datetime(now) if now else None)
    if not mail_enabled():
        return counts
    counts["notices_unsent"] = sum(
        not recommendation_notify(recommendation_id=rec_id, event=event)
        for rec_id, event in notices_pending())
    return counts


@shared_task(name="reclaim.notify", **DB_RETRY)
def notify_task(recommendation_id: int, event: str) -> bool:
    """Mail the team's leads about one step of a recommendation (once per lead)."""
    return recommendation_notify(recommendation_id=recommendation_id, event=event)
