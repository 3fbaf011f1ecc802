"""Celery tasks of the reports app: thin, named, idempotent."""

import logging

from celery import shared_task

from gpuquota.core.errors import Conflict
from gpuquota.mail.conf import retry_countdown_s
from reports.models import Statement
from reports.sending import statement_send

logger = logging.getLogger(__name__)


@shared_task(name="reports.statement_send", bind=True, max_retries=8, acks_late=True)
def statement_send_task(self, statement_id: int) -> dict:
    """Mail an approved statement to its team's leads; retried with a growing delay (1
    minute doubling, at most an hour, 8 times) while some lead could not be served. A
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
        raise self.retry(countdown=retry_countdown_s(self.request.retries))
    return {"statement": statement_id, **outcome.summary()}
