"""A worker killed with SIGKILL (process group and all, as the OOM killer or a lost node
would) in the middle of mailing a statement: with a real Redis broker, beat, workers and
the loopback SMTP server, the sending starts again by itself within the sweep's bounds
once a worker runs, each lead gets exactly one accepted message and the statement is
`sent`. Nobody queues anything by hand."""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Membership
from gpuquota.core.timeutil import Period
from gpuquota.mail.models import MailDelivery
from reports.models import Statement
from reports.services_statements import statement_approve
from tests.factories import MembershipFactory, UserFactory
from tests.faults.conftest import database_url
from tests.helpers import celery_worker
from tests.stmtdocs.factories import draft, priced_gpus, reserved_hours

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(240)]
STALE_S = 5


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _statement_with_three_leads(roles) -> Statement:
    """Vision's statement of two months ago (approvable on any date), three leads."""
    for name in ("lead2", "lead3"):
        MembershipFactory(user=UserFactory(username=name), team=roles.team,
                          role=Membership.Role.LEAD)
    now = timezone.now()
    first_of_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = (first_of_month - timedelta(days=40)).replace(day=1)
    period = Period.month(start.year, start.month)
    [gpu] = priced_gpus(1)
    reserved_hours(roles.team, gpu, period.start + timedelta(days=2), 3, reported_minutes=60)
    draft(period, now=now)
    return Statement.objects.get(team=roles.team, month=period.start.date())


def test_a_worker_killed_mid_send_recovers_without_anyone(
        tasks_through_own_redis, roles, smtp_server, tmp_path):
    statement = _statement_with_three_leads(roles)
    smtp_server.hang.add("lead2@example.org")  # the worker will be inside this conversation
    broker = tasks_through_own_redis
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": broker.url,
           "EMAIL_URL": f"smtp://127.0.0.1:{smtp_server.port}", "GPUQUOTA_MAIL_ENABLED": "1",
           "GPUQUOTA_STATEMENT_SEND_SWEEP_S": "1", "GPUQUOTA_STATEMENT_SEND_STALE_S": str(STALE_S)}

    with celery_worker(env=env, log_path=tmp_path / "killed.log") as doomed:
        statement_approve(statement=statement, by=roles.admin)  # its send goes to the broker
        _wait_for(lambda: smtp_server.hanging == 1 or doomed.poll() is not None, 60,
                  "the worker to be in the middle of the second lead's message")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    killed_at = time.monotonic()
    rows = dict(MailDelivery.objects.filter(key=f"statement:{statement.pk}")
                .values_list("recipient__username", "status"))
    assert rows == {"lead": "sent", "lead2": "sending"}  # lead3 never reached
    statement.refresh_from_db()
    assert statement.status == Statement.Status.APPROVED
    smtp_server.hang.clear()

    # The service comes back (a restarted container): a worker with beat, nothing queued by
    # hand. The killed task's message waits in Redis for its visibility timeout (an hour).
    with celery_worker(env=env, log_path=tmp_path / "restarted.log", options=(
            "-B", "-s", str(tmp_path / "beat-schedule"), "--concurrency", "1",
            "--without-gossip", "--without-mingle")):
        _wait_for(lambda: Statement.objects.get(pk=statement.pk).status == "sent", 120,
                  "the sweep to send the statement again")
    recovered_s = time.monotonic() - killed_at
    assert sorted(smtp_server.recipients()) == [
        "lead2@example.org", "lead3@example.org", "lead@example.org"]  # each exactly once
    assert recovered_s < 120
    print(f"recovered {recovered_s:.1f} s after the kill (stale after {STALE_S} s)")
