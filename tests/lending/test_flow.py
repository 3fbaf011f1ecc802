"""Lend → borrowers run → the lead returns → the samples show the GPU free → the borrowers'
leads get one digest each, through a real Celery worker on Redis and the loopback SMTP
server, on a frozen clock (every task is given its instant); and a worker killed in the
middle of a return, after which the GPU is returned once."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from gpuquota.core.models import AuditEntry
from gpuquota.lending.services import loan_return
from gpuquota.outbox.models import Notification
from gpuquota.reservations.models import Loan
from reports.channels import channel_add
from tests.helpers import suite_database_url
from tests.lending.factories import (
    AUDIO_USER,
    BORROWER_USER,
    IDLE,
    MIN,
    NOW,
    World,
    held_gpus,
    samples,
)

ROOT = Path(django_settings.BASE_DIR)
E = Loan.EndReason
pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

KILLED_RETURN = """
import sys, time, django
django.setup()
from django.utils.dateparse import parse_datetime
from gpuquota.lending.services import loan_return
from gpuquota.reservations.models import Loan
save = Loan.save
def save_then_hang(self, *args, **kwargs):
    save(self, *args, **kwargs)
    open(sys.argv[3], "w").write("returned, not committed")
    time.sleep(600)
Loan.save = save_then_hang
loan_return(loan=Loan.objects.get(pk=int(sys.argv[1])), reason="owner_ask",
            at=parse_datetime(sys.argv[2]))
"""

# The worker's lending settings (the `worker` fixture, tests/conftest.py).
WORKER_ENV = {"LEND_AFTER_IDLE_S": str(int(IDLE.total_seconds())), "LEND_RETURN_NOTICE_S": "300"}


@pytest.fixture
def flow(transactional_db, settings, worker, smtp, tasks_to_the_worker):
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    smtp.messages.clear()
    world = World.create()
    reservation = world.reserve(count=2)
    for gpu in held_gpus(reservation):
        samples(gpu, start=NOW - IDLE, end=NOW, util=0)
    return world, reservation


def wait_for(predicate, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def scan(at, until, what: str):
    """Ask the worker for a scan at `at`; wait until `until()` holds (no result backend)."""
    from gpuquota.lending.tasks import scan_task

    scan_task.delay(now=at.isoformat())
    wait_for(until, what)


def audited(action: str, count: int):
    return lambda: AuditEntry.objects.filter(action=action).count() >= count


def test_lend_return_free_and_one_digest_per_borrowing_team(flow, smtp, settings):
    world, reservation = flow
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    for team, lead in ((world.team, world.lead), (world.other_team, world.other_lead)):
        channel_add(team=team, kind="webhook", name="hook", url="http://127.0.0.1:9/", by=lead)
    scan(NOW, audited("loan.lend", 2), "two GPUs lent")
    assert Loan.objects.filter(lent_from=NOW, returned_at__isnull=True).count() == 2
    first, second = Loan.objects.order_by("gpu_id")
    samples(first.gpu, start=NOW, end=NOW + 10 * MIN, util=90,
            users=(BORROWER_USER, AUDIO_USER))
    samples(second.gpu, start=NOW, end=NOW + 10 * MIN, util=90, users=(BORROWER_USER,))
    for loan in (first, second):
        loan_return(loan=loan, reason=E.OWNER_ASK, actor=world.lead, at=NOW + 10 * MIN)
    samples(first.gpu, start=NOW + 10 * MIN, end=NOW + 12 * MIN, util=90,
            users=(AUDIO_USER,))  # preempted a little late: 2 minutes
    samples(first.gpu, start=NOW + 12 * MIN, end=NOW + 13 * MIN, util=0)
    samples(second.gpu, start=NOW + 10 * MIN, end=NOW + 11 * MIN, util=0)
    scan(NOW + 13 * MIN, audited("loan.freed", 2), "both GPUs seen free")
    assert {loan.gpu_id: loan.freed_at for loan in Loan.objects.all()} == {
        first.gpu_id: NOW + 12 * MIN, second.gpu_id: NOW + 10 * MIN}

    from gpuquota.lending.tasks import preemption_digest_task

    preemption_digest_task.delay(now=(NOW + 15 * MIN).isoformat())
    wait_for(lambda: len(smtp.messages) >= 2, "the two digests")
    assert not Loan.objects.filter(preempt_notified_at__isnull=True).exists()
    time.sleep(0.5)
    [speech] = smtp.to(world.other_lead.email)
    [audio] = smtp.to(world.audio_lead.email)
    assert first.gpu.uuid in speech.text() and second.gpu.uuid in speech.text()
    assert first.gpu.uuid in audio.text() and second.gpu.uuid not in audio.text()
    assert "Audio &lt;&amp;&gt;" in audio.html() and "Audio <&>" in audio.text()
    assert "2 borrowed GPUs" in speech.message["Subject"]
    preemption_digest_task.delay(now=(NOW + 30 * MIN).isoformat())
    time.sleep(2)
    assert len(smtp.messages) == 2  # a digest, not a mail per job, and never twice
    assert not smtp.to(world.lead.email)  # the owners are not borrowers
    # ... and the teams' channels heard it too: the owners of each loan, the borrowers once
    told = Notification.objects.order_by("id").values_list("target", "event")
    owner, borrower = (f"team-channel:{t.channels.get().pk}" for t in (world.team,
                                                                     world.other_team))
    assert sorted(event for target, event in told if target == owner) == [
        "loan.lent", "loan.lent", "loan.returned", "loan.returned"]
    assert [event for target, event in told if target == borrower] == ["loan.preempted"]


def test_a_worker_killed_mid_return_returns_the_gpu_once(flow, tmp_path):
    world, reservation = flow
    scan(NOW, audited("loan.lend", 2), "two GPUs lent")
    loan = Loan.objects.order_by("gpu_id").first()
    marker = tmp_path / "marker"
    env = {**os.environ, "DATABASE_URL": suite_database_url(), "DJANGO_SETTINGS_MODULE":
           "gpuquota.settings"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RETURN, str(loan.pk),
                             (NOW + 5 * MIN).isoformat(), str(marker)], cwd=ROOT, env=env,
                            start_new_session=True)
    try:
        wait_for(marker.exists, "the return to be written, not committed")
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    loan.refresh_from_db()
    assert loan.returned_at is None  # rolled back with the killed worker
    loan_return(loan=loan, reason=E.OWNER_ASK, actor=world.lead, at=NOW + 6 * MIN)
    loan_return(loan=loan, reason=E.OWNER_ASK, actor=world.lead, at=NOW + 7 * MIN)
    scan(NOW + 8 * MIN, audited("loan.return", 1), "the scan")
    time.sleep(1)
    loan.refresh_from_db()
    assert (loan.returned_at, loan.end_reason) == (NOW + 6 * MIN, E.OWNER_ASK)
    assert AuditEntry.objects.filter(action="loan.return", object_id=str(loan.pk)).count() == 1
