"""Redis unreachable when a change commits: the mail is in the outbox with the change; once
Redis is back, the beat sweep (sent through Redis to a real Celery worker) mails it, each
recipient once. Reservation requests are the example: they have no sweep of their own."""

import logging
import os
import time

import pytest

from gpuquota.celery import app
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.outbox import mail_send_queued
from gpuquota.mail.tasks import mail_send_due_task
from tests.factories import AdminFactory
from tests.helpers import celery_worker, suite_database_url
from tests.reservations.factories import Fleet

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(180)]
UNREACHABLE = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connection refused


def _broker(url: str) -> None:
    """Point this process's producer at `url` (the pools cache the old connection)."""
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def worker(transactional_db, smtp_server, tmp_path):
    """A real Celery worker on this suite's Redis, mailing to the loopback SMTP server."""
    assert "/test_" in suite_database_url()
    app.control.purge()
    env = {**os.environ, "DATABASE_URL": suite_database_url(), "GPUQUOTA_MAIL_ENABLED": "1",
           "EMAIL_URL": f"smtp://127.0.0.1:{smtp_server.port}"}
    log_path = tmp_path / "worker.log"
    with celery_worker(env=env, log_path=log_path) as proc:
        yield proc


@pytest.fixture
def tasks_through_redis():
    previous = app.conf.broker_url, app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    _broker(previous[0])
    app.conf.task_always_eager = previous[1]


def test_broker_down_at_commit_the_row_stays_and_the_sweep_sends_it(
        worker, smtp_server, tasks_through_redis, caplog):
    fleet = Fleet.create()
    AdminFactory(username="second-admin")
    working_broker = app.conf.broker_url

    _broker(UNREACHABLE)
    with caplog.at_level(logging.ERROR, logger="django.db.backends.base"):
        reservation = fleet.request(count=6, purpose="ablation runs")  # over quota: pending
    assert reservation.status == "pending"  # committed: the outage does not undo the change
    assert any("on_commit" in r.getMessage() for r in caplog.records)  # the task was lost
    rows = MailDelivery.objects.filter(key=f"reservation:{reservation.pk}:pending")
    assert sorted(rows.values_list("status", flat=True)) == ["queued", "queued"]
    time.sleep(2)
    assert smtp_server.messages == []

    _broker(working_broker)  # Redis is back: beat's next `mail.send_due` reaches the worker
    mail_send_due_task.delay()
    _wait_for(lambda: len(smtp_server.messages) >= 2, 90, "the worker's sweep to mail")
    assert sorted(smtp_server.recipients()) == ["root@example.org", "second-admin@example.org"]
    assert set(rows.values_list("status", flat=True)) == {"sent"}

    mail_send_due_task.delay()  # a second sweep (and one here) mails nobody again
    assert mail_send_queued().sent == []
    time.sleep(2)
    assert len(smtp_server.messages) == 2
