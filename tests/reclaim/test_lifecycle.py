"""Lifecycle edges without telemetry: what a release does when the world changed during
the grace, and a right-size release."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.errors import Conflict
from gpuquota.reservations.models import Assignment
from gpuquota.reservations.services import reservation_release
from reclaim.lifecycle import (
    recommendation_accept,
    recommendation_object,
    recommendation_release,
    recommendation_uphold,
)
from reclaim.models import Exemption
from tests.reclaim.factories import World, held_gpus, make_rec

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return World.create(gpus=4)


def accept_and_release(world, rec):
    now = timezone.now().replace(microsecond=0)
    recommendation_accept(recommendation=rec, actor=world.admin, now=now)
    return recommendation_release(recommendation=rec, now=now + timedelta(hours=5)), now


def test_an_exemption_made_during_the_grace_stops_the_release(world):
    rec = make_rec(world)
    recommendation_accept(recommendation=rec, actor=world.admin)
    Exemption.objects.create(reservation=rec.reservation, reason="benchmark week",
                             until=timezone.now() + timedelta(days=2), created_by=world.admin,
                             created_at=timezone.now())
    rec = recommendation_release(recommendation=rec, now=timezone.now() + timedelta(hours=5))
    assert rec.status == "closed" and "benchmark week" in rec.closed_note
    assert not Assignment.objects.filter(end_reason="reclaimed").exists()


def test_a_reservation_released_by_its_team_during_the_grace_closes_it(world):
    rec = make_rec(world)
    recommendation_accept(recommendation=rec, actor=world.admin)
    reservation_release(reservation=rec.reservation, actor=world.lead)
    rec = recommendation_release(recommendation=rec, now=timezone.now() + timedelta(hours=5))
    assert rec.status == "closed" and "ended before" in rec.closed_note


def test_a_right_size_release_shrinks_to_the_target(world):
    rec = make_rec(world, kind="right_size", count=3, gpus=2)
    gone = {r.gpu_id for r in rec.gpu_rows.all()}
    rec, accepted_at = accept_and_release(world, rec)
    assert rec.status == "released"
    rec.reservation.refresh_from_db()
    assert rec.reservation.count == 1 and rec.reservation.status == "active"
    ended = Assignment.objects.filter(reservation=rec.reservation, end_reason="reclaimed")
    assert {a.gpu_id for a in ended} == gone
    assert {a.assigned_until for a in ended} == {accepted_at + timedelta(hours=4)}
    kept = set(g.id for g in held_gpus(rec.reservation)) - gone
    assert len(kept) == 1


def test_releasing_every_gpu_ends_the_reservation_and_a_second_run_does_nothing(world):
    rec = make_rec(world, count=2, gpus=2)
    rec, _at = accept_and_release(world, rec)
    rec.reservation.refresh_from_db()
    assert rec.reservation.status == "ended"
    again = recommendation_release(recommendation=rec, now=timezone.now() + timedelta(hours=6))
    assert again.status == "released" and Assignment.objects.filter(
        end_reason="reclaimed").count() == 2


def test_one_objection_per_recommendation_after_an_admin_upheld_it(world):
    rec = make_rec(world)
    now = timezone.now().replace(microsecond=0)
    recommendation_accept(recommendation=rec, actor=world.admin, now=now)
    recommendation_object(recommendation=rec, actor=world.lead, reason="eval tonight", now=now)
    rec = recommendation_uphold(recommendation=rec, actor=world.admin, reason="idle 3 days",
                                now=now + timedelta(minutes=5))
    with pytest.raises(Conflict, match="one objection per recommendation"):
        recommendation_object(recommendation=rec, actor=world.lead, reason="really",
                              now=now + timedelta(minutes=10))
    rec.refresh_from_db()
    assert rec.status == "accepted" and rec.objection_reason == "eval tonight"
    assert rec.objection_decision == "upheld"


def test_a_gpu_lent_at_the_release_is_kept_and_one_returned_before_goes(world):
    """Lending took the accepted GPU during the grace: releasing it would cut the
    borrowers' work, so the release keeps it and says why; once returned, it goes."""
    from gpuquota.lending.services import loan_lend, loan_return
    from reclaim.models import RecommendationGpu

    rec = make_rec(world)
    [gpu] = [row.gpu for row in rec.gpu_rows.all()]
    assignment = Assignment.objects.get(reservation=rec.reservation, gpu=gpu)
    now = timezone.now().replace(microsecond=0)
    recommendation_accept(recommendation=rec, actor=world.admin, now=now)
    loan = loan_lend(assignment=assignment, at=now + timedelta(hours=1), reason="idle")
    rec = recommendation_release(recommendation=rec, now=now + timedelta(hours=5))
    assert rec.status == "closed" and gpu.uuid in rec.closed_note
    row = RecommendationGpu.objects.get(recommendation=rec)
    assert (row.state, row.note) == ("skipped", "lent at the release: lending puts it to work")
    assignment.refresh_from_db()
    assert assignment.end_reason != "reclaimed"

    again = make_rec(world)
    [gpu] = [row.gpu for row in again.gpu_rows.all()]
    other = Assignment.objects.get(reservation=again.reservation, gpu=gpu)
    recommendation_accept(recommendation=again, actor=world.admin, now=now)
    loan_return(loan=loan_lend(assignment=other, at=now + timedelta(hours=1), reason="idle"),
                reason="owner_ask", at=now + timedelta(hours=2))
    assert loan.returned_at is None  # the first loan is still open, on another GPU
    again = recommendation_release(recommendation=again, now=now + timedelta(hours=5))
    assert again.status == "released"
