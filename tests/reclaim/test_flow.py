"""Accept → the leads' mail → grace → release, through a real Celery worker on Redis
and the real loopback SMTP server, with a frozen clock (every step is given its
instant): objections upheld and withdrawn, a GPU busy again during the grace, and a
worker killed half-way through a release."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from gpuquota.core.models import AuditEntry
from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.seconds import reserved_seconds
from reclaim import lifecycle
from reclaim.models import Recommendation, RecommendationGpu
from reclaim.services import recommendations_evaluate
from tests.helpers import suite_database_url
from tests.reclaim.factories import DAY, NOW, World, held_gpus, rollup, telemetry

ROOT = Path(django_settings.BASE_DIR)
LOOKBACK, GRACE = timedelta(hours=1), timedelta(minutes=30)
S = Recommendation.Status
pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(300)]

KILLED_RELEASE = """
import sys, time, django
django.setup()
from django.utils.dateparse import parse_datetime
from reclaim import lifecycle
from reclaim.models import RecommendationGpu
save = RecommendationGpu.save
def save_then_hang(self, *args, **kwargs):
    save(self, *args, **kwargs)
    open(sys.argv[2], "w").write("one GPU written")
    time.sleep(600)
RecommendationGpu.save = save_then_hang
lifecycle.recommendations_release_due(now=parse_datetime(sys.argv[1]))
"""


@pytest.fixture
def flow(transactional_db, settings, worker, smtp, tasks_to_the_worker):
    settings.RECLAIM_LOOKBACK_S = int(LOOKBACK.total_seconds())
    settings.RECLAIM_GRACE_S = int(GRACE.total_seconds())
    settings.RECLAIM_HISTORY_DAYS = 0  # an hour of history, as in the demo
    smtp.messages.clear()
    world = World.create(gpus=4)
    reservation = world.reserve(count=2)
    idle, used = held_gpus(reservation)
    telemetry(idle, start=NOW - LOOKBACK, end=NOW, util=0)
    telemetry(used, start=NOW - LOOKBACK, end=NOW, util=90)
    rollup()
    recommendations_evaluate(now=NOW)
    rec = Recommendation.objects.get(kind=Recommendation.Kind.RECLAIM)
    return world, reservation, rec, idle, used


def wait_for(predicate, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def release_due(at, *, expect_status):
    from reclaim.tasks import release_due_task

    release_due_task.delay(now=at.isoformat())
    wait_for(lambda: Recommendation.objects.get(kind="reclaim").status == expect_status,
             f"the worker to make the recommendation {expect_status}")


def settle(smtp, count: int):
    wait_for(lambda: len(smtp.messages) >= count, f"{count} message(s)")
    time.sleep(0.5)
    assert len(smtp.messages) == count, [m.message["Subject"] for m in smtp.messages]


def test_accept_mails_the_lead_and_the_release_after_grace_stops_the_charges(flow, smtp):
    world, reservation, rec, idle, used = flow
    lifecycle.recommendation_accept(recommendation=rec, actor=world.admin, now=NOW)
    settle(smtp, 1)
    [notice] = smtp.to(world.lead.email)
    assert "will be released" in notice.message["Subject"]
    assert idle.uuid in notice.text() and used.uuid not in notice.text()
    assert "2026-11-30 12:30" in notice.text() and idle.uuid in notice.html()

    from reclaim.tasks import release_due_task

    release_due_task.delay(now=(NOW + GRACE - timedelta(seconds=1)).isoformat())
    time.sleep(2)
    assert Recommendation.objects.get(pk=rec.pk).status == S.ACCEPTED  # grace not over
    release_due(NOW + GRACE + timedelta(minutes=7), expect_status=S.RELEASED)
    rec.refresh_from_db()
    assert rec.released_at == NOW + GRACE  # the instant the grace ended, not the run
    ended = Assignment.objects.get(reservation=reservation, gpu=idle)
    assert (ended.assigned_until, ended.end_reason) == (NOW + GRACE, "reclaimed")
    reservation.refresh_from_db()
    assert (reservation.status, reservation.count) == (Reservation.Status.ACTIVE, 1)
    period = Period(NOW - 2 * DAY, NOW + 2 * DAY)
    assert reserved_seconds(period=period, reservation=reservation) == int(
        (2 * DAY + GRACE).total_seconds() + (4 * DAY).total_seconds())
    settle(smtp, 2)
    released = smtp.messages[-1]
    assert released.to == world.lead.email and "Released" in released.message["Subject"]
    assert "12:30" in released.text()
    assert set(AuditEntry.objects.filter(object_id=str(rec.pk), action__startswith="reclaim.")
               .values_list("action", flat=True)) == {
        "reclaim.recommend", "reclaim.accept", "reclaim.release"}


def test_an_objection_upheld_releases_at_the_decision(flow, smtp):
    world, reservation, rec, idle, _used = flow
    lifecycle.recommendation_accept(recommendation=rec, actor=world.admin, now=NOW)
    lifecycle.recommendation_object(recommendation=rec, actor=world.lead,
                                    reason="the eval run starts tonight",
                                    now=NOW + timedelta(minutes=10))
    release_due(NOW + GRACE + timedelta(minutes=1), expect_status=S.OBJECTED)
    assert Assignment.objects.get(reservation=reservation, gpu=idle).end_reason == "scheduled"
    decided = NOW + GRACE + timedelta(minutes=20)
    lifecycle.recommendation_uphold(recommendation=rec, actor=world.admin,
                                    reason="no job since Tuesday", now=decided)
    release_due(decided + timedelta(minutes=3), expect_status=S.RELEASED)
    assert Assignment.objects.get(reservation=reservation, gpu=idle).assigned_until == decided
    settle(smtp, 4)  # the notice, the objection (to the admin), the decision, the release
    assert [m.message["Subject"].split(":")[0] for m in smtp.to(world.admin.email)] == [
        "[gpuquota] Objection to decide"]
    assert any("Objection overruled" in m.message["Subject"]
               for m in smtp.to(world.lead.email))


def test_an_objection_withdrawn_keeps_the_gpus(flow, smtp):
    world, reservation, rec, idle, _used = flow
    lifecycle.recommendation_accept(recommendation=rec, actor=world.admin, now=NOW)
    lifecycle.recommendation_object(recommendation=rec, actor=world.lead, reason="needed",
                                    now=NOW + timedelta(minutes=5))
    lifecycle.recommendation_withdraw(recommendation=rec, actor=world.admin,
                                      reason="agreed with the team", now=NOW + GRACE)
    release_due(NOW + 2 * GRACE, expect_status=S.DISMISSED)
    assert Assignment.objects.get(reservation=reservation, gpu=idle).assigned_until == (
        NOW + 2 * DAY)
    settle(smtp, 3)  # the notice, the objection (to the admin), the decision
    assert any("Objection accepted" in m.message["Subject"]
               for m in smtp.to(world.lead.email))


def test_a_gpu_busy_again_during_the_grace_is_not_released(flow, smtp):
    world, reservation, rec, idle, _used = flow
    lifecycle.recommendation_accept(recommendation=rec, actor=world.admin, now=NOW)
    telemetry(idle, start=NOW + timedelta(minutes=10), end=NOW + timedelta(minutes=14), util=70)
    release_due(NOW + GRACE, expect_status=S.CLOSED)
    rec.refresh_from_db()
    assert "busy again" in rec.closed_note and idle.uuid in rec.closed_note
    assert Assignment.objects.get(reservation=reservation, gpu=idle).end_reason == "scheduled"
    assert RecommendationGpu.objects.get(recommendation=rec).state == "skipped"
    settle(smtp, 2)
    assert "Not released" in smtp.messages[-1].message["Subject"]


def test_a_worker_killed_mid_release_changes_nothing_and_the_next_run_does_it_once(
        flow, smtp, tmp_path):
    world, reservation, rec, idle, _used = flow
    lifecycle.recommendation_accept(recommendation=rec, actor=world.admin, now=NOW)
    settle(smtp, 1)
    marker = tmp_path / "half"
    run_at = NOW + GRACE + timedelta(minutes=2)
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_RELEASE, run_at.isoformat(), str(marker)], cwd=ROOT,
        env={**os.environ, "DATABASE_URL": suite_database_url(),
             "DJANGO_SETTINGS_MODULE": "gpuquota.settings"})
    wait_for(marker.exists, "the release to be half-way")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=10)
    rec.refresh_from_db()
    assert rec.status == S.ACCEPTED
    assert Assignment.objects.get(reservation=reservation, gpu=idle).end_reason == "scheduled"
    release_due(run_at, expect_status=S.RELEASED)
    ended = Assignment.objects.get(reservation=reservation, gpu=idle)
    assert (ended.assigned_until, ended.end_reason) == (NOW + GRACE, "reclaimed")
    assert AuditEntry.objects.filter(action="reclaim.release", object_id=str(rec.pk)).count() == 1
    assert AuditEntry.objects.filter(action="reservation.reclaim").count() == 1
    settle(smtp, 2)
    release_due(run_at + timedelta(minutes=5), expect_status=S.RELEASED)  # again: nothing
    time.sleep(1)
    assert AuditEntry.objects.filter(action="reservation.reclaim").count() == 1
    assert len(smtp.messages) == 2
