"""No GPU is ever double-booked, proven under concurrency on PostgreSQL.

Real threads, each with its own database connection, fire requests at the same
instant for fewer GPUs than they ask in total. Exactly the capacity is granted,
no team exceeds its quota, every other request gets a clean "no capacity" (409)
or becomes pending (over quota), and nothing raises anything else.
"""

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection

from accounts.models import Team
from gpuquota.core.errors import DomainError
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import reservation_approve, reservation_create
from tests.factories import QuotaFactory, TeamFactory
from tests.helpers import run_concurrently
from tests.reservations.factories import NOW, Fleet, lead_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
H = timedelta(hours=1)


def _fire(jobs):
    """Run the callables at once from their own threads; outcome per job."""
    started = time.monotonic()
    outcomes = []
    for result in run_concurrently(jobs):
        if isinstance(result, DomainError):
            outcomes.append((result.code, result.message))
        elif isinstance(result, Exception):  # any other exception is the failure we look for
            outcomes.append(("error", repr(result)))
        else:
            outcomes.append(("ok", result))
    return outcomes, time.monotonic() - started


def _overlaps_in_db() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT count(*) FROM {Assignment._meta.db_table} a
            JOIN {Assignment._meta.db_table} b ON a.gpu_id = b.gpu_id AND a.id < b.id
            AND tstzrange(a.assigned_from, a.assigned_until)
                && tstzrange(b.assigned_from, b.assigned_until)"""
        )
        return cursor.fetchone()[0]


def test_concurrent_requests_get_exactly_the_capacity(capsys, caplog):
    caplog.set_level("INFO", logger="gpuquota.reservations.assigning")
    fleet = Fleet.create(sizes=(4, 4, 2), vision_quota=4, speech_quota=4)  # 10 GPUs
    teams = [fleet.vision, fleet.speech]
    leads = {fleet.vision.id: fleet.vision_lead, fleet.speech.id: fleet.speech_lead}
    for slug in ("robotics", "nlp"):
        team = TeamFactory(name=slug.title(), slug=slug)
        QuotaFactory(team=team, gpu_class=fleet.gpu_class, gpus=4)
        leads[team.id] = lead_of(team)
        teams.append(team)
    jobs = []
    for i in range(24):  # 6 per team, 1 GPU each: 24 asked, 16 in quota, 10 exist
        team = teams[i % 4]
        jobs.append(lambda team=team: reservation_create(
            team=team, gpu_class=fleet.gpu_class, count=1, start=NOW + H, end=NOW + 3 * H,
            requested_by=leads[team.id], now=NOW).status)
    outcomes, duration = _fire(jobs)

    kinds = Counter(o[0] if o[0] != "ok" else o[1] for o in outcomes)
    assert "error" not in kinds, [o for o in outcomes if o[0] == "error"]
    assert kinds["scheduled"] == 10  # exactly the capacity
    assert kinds["scheduled"] + kinds["pending"] + kinds["no_capacity"] == 24
    assert all("No capacity" in o[1] for o in outcomes if o[0] == "no_capacity")
    assert _overlaps_in_db() == 0
    assert Assignment.objects.count() == 10
    for team in Team.objects.all():
        held = Reservation.objects.filter(team=team, status="scheduled").count()
        assert held <= 4  # quotas hold
    races = sum("race lost" in r.message for r in caplog.records)
    with capsys.disabled():
        print(f"\n[race] requests=24 granted={kinds['scheduled']} pending(over quota)="
              f"{kinds['pending']} refused(no capacity)={kinds['no_capacity']} "
              f"races_lost_at_the_constraint={races} duration={duration:.2f}s")


def test_the_database_itself_refuses_overlapping_assignments():
    from django.db import IntegrityError, transaction

    fleet = Fleet.create(sizes=(1,))
    r = reservation_create(team=fleet.vision, gpu_class=fleet.gpu_class, count=1, start=NOW + H,
                           end=NOW + 3 * H, requested_by=fleet.vision_lead, now=NOW)
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(reservation=r, gpu=fleet.gpus[0], assigned_from=NOW + 2 * H,
                                  assigned_until=NOW + 4 * H)
    # touching is fine
    Assignment.objects.create(reservation=r, gpu=fleet.gpus[0], assigned_from=NOW + 3 * H,
                              assigned_until=NOW + 4 * H)


def test_concurrent_requests_of_one_team_never_exceed_its_quota(capsys):
    fleet = Fleet.create(sizes=(8, 8, 8), vision_quota=5)
    jobs = [
        lambda count=count: reservation_create(
            team=fleet.vision, gpu_class=fleet.gpu_class, count=count, start=NOW + H,
            end=NOW + 2 * H, requested_by=fleet.vision_lead, now=NOW).status
        for count in [1, 2] * 10
    ]
    outcomes, duration = _fire(jobs)
    assert all(o[0] == "ok" for o in outcomes), outcomes
    granted = sum(r.count for r in Reservation.objects.filter(status="scheduled"))
    assert granted <= 5 and granted >= 4
    assert Reservation.objects.filter(status="pending").count() + Reservation.objects.filter(
        status="scheduled").count() == 20
    with capsys.disabled():
        print(f"\n[race one team] requests=20 gpus_granted={granted} (quota 5) "
              f"duration={duration:.2f}s")


def test_concurrent_approvals_and_requests_never_double_book(capsys):
    # 6 GPUs; speech's guarantee leaves 2 that vision's approvals can ever get (a request
    # beyond that is refused at once, not queued).
    fleet = Fleet.create(sizes=(4, 2), vision_quota=0, speech_quota=4)
    pending = [
        reservation_create(team=fleet.vision, gpu_class=fleet.gpu_class, count=2, start=NOW + H,
                           end=NOW + 2 * H, requested_by=fleet.vision_lead, now=NOW)
        for _ in range(10)
    ]
    jobs = [lambda r=r: reservation_approve(reservation=r, actor=fleet.admin, now=NOW).status
            for r in pending]
    jobs += [
        lambda: reservation_create(team=fleet.speech, gpu_class=fleet.gpu_class, count=1,
                                   start=NOW + H, end=NOW + 2 * H,
                                   requested_by=fleet.speech_lead, now=NOW).status
        for _ in range(10)
    ]
    outcomes, duration = _fire(jobs)
    assert not [o for o in outcomes if o[0] == "error"], outcomes
    assert _overlaps_in_db() == 0
    assert Assignment.objects.count() <= 6
    with capsys.disabled():
        kinds = Counter(o[0] if o[0] != "ok" else str(o[1]) for o in outcomes)
        print(f"\n[race approvals] jobs=20 outcomes={dict(kinds)} "
              f"assigned={Assignment.objects.count()} duration={duration:.2f}s")


def test_concurrent_over_quota_approvals_keep_other_teams_guarantees(capsys, monkeypatch):
    """Approvals of different teams race for the capacity beyond speech's unused
    guarantee (3 of 6 GPUs) while speech's lead books inside its guarantee. The
    guarantee check is slowed down to widen the race window between read and write."""
    from gpuquota.reservations import services

    checked = services.guarantee_shortfall_at

    def slow_check(**kwargs):
        result = checked(**kwargs)
        time.sleep(0.05)
        return result

    monkeypatch.setattr(services, "guarantee_shortfall_at", slow_check)
    fleet = Fleet.create(sizes=(4, 2), vision_quota=0, speech_quota=3)
    robotics = TeamFactory(name="Robotics", slug="robotics")
    robotics_lead = lead_of(robotics)
    pending = []
    for i in range(10):
        team, lead = (fleet.vision, fleet.vision_lead) if i % 2 else (robotics, robotics_lead)
        pending.append(reservation_create(team=team, gpu_class=fleet.gpu_class, count=3,
                                          start=NOW + H, end=NOW + 2 * H, requested_by=lead,
                                          now=NOW))
    assert {r.status for r in pending} == {"pending"}
    jobs = [lambda r=r: reservation_approve(reservation=r, actor=fleet.admin, now=NOW).status
            for r in pending]

    def speech_books_later():
        time.sleep(0.3)  # after the approvals have read the guarantees
        return reservation_create(team=fleet.speech, gpu_class=fleet.gpu_class, count=1,
                                  start=NOW + H, end=NOW + 2 * H,
                                  requested_by=fleet.speech_lead, now=NOW).status

    jobs += [speech_books_later] * 5
    outcomes, duration = _fire(jobs)
    assert not [o for o in outcomes if o[0] == "error"], outcomes
    approvals, speech = outcomes[:10], outcomes[10:]
    granted = [o for o in approvals if o[0] == "ok"]
    assert len(granted) == 1  # 6 GPUs − speech's guarantee of 3 leaves room for one
    assert sorted(str(o[1]) for o in speech) == ["pending"] * 2 + ["scheduled"] * 3
    assert _overlaps_in_db() == 0
    assert Assignment.objects.count() == 6
    with capsys.disabled():
        print(f"\n[race guarantees] approvals=10 granted={len(granted)} speech in-quota "
              f"granted=3/3 duration={duration:.2f}s")
