"""The guarded rule waits for history and never takes a lent GPU (docs/reclaim.md, "The
history gate", "Lent GPUs"): until the team has RECLAIM_HISTORY_DAYS days of samples of the
class, its GPUs found idle are kept and the evidence says "not enough history: N of M
days"; a GPU lent now is kept as "lent now". The evaluation, the review card and the
backtest say and do the same."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse

from gpuquota.lending.services import loan_lend, loan_return
from reclaim.backtest import policy_backtest
from reclaim.conf import DEFAULT_HISTORY_DAYS, policy
from reclaim.evaluation import findings_evaluate
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate
from tests.reclaim.factories import DAY, NOW, World
from tests.reclaim.test_guarded import assignments, found, stored

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def abandoned(world, *, days: int, count: int = 1, team=None):
    """A reservation of `days` so far, reported empty all along (no process, no memory,
    not one busy second): idle by both signals from its first day."""
    reservation = world.reserve(count=count, team=team, start=NOW - days * DAY,
                                end=NOW + 10 * DAY)
    for a in assignments(reservation):
        stored(a, NOW - days * DAY, NOW)
    return reservation


def test_the_default_and_its_bounds(settings, monkeypatch):
    monkeypatch.delenv("RECLAIM_HISTORY_DAYS", raising=False)
    settings.RECLAIM_HISTORY_DAYS = None
    assert policy().history_days == DEFAULT_HISTORY_DAYS
    settings.RECLAIM_HISTORY_DAYS = 0  # the gate off: a value, not "unset"
    assert policy().history_days == 0
    settings.RECLAIM_HISTORY_DAYS = 29  # beyond the guards' look-back of four weeks
    with pytest.raises(ImproperlyConfigured, match="RECLAIM_HISTORY_DAYS must be between 0 "
                                                   "and 28"):
        policy()


def test_too_little_history_keeps_the_gpu_and_says_how_much():
    world = World.create()
    reservation = abandoned(world, days=3, count=2)
    gpus = [a.gpu_id for a in assignments(reservation)]
    assert found(reservation, NOW, rule="spec")[0] == gpus  # the spec's rule takes them
    assert found(reservation, NOW, history_days=7)[1] == {g: ("guarded", "history")
                                                          for g in gpus}
    result = recommendations_evaluate_found(reservation, history_days=7)
    assert {ev["reason"] for ev in result.gpus.values()} == {
        "not enough history: 3 of 7 days"}
    # a day more than it has is still too few; as many days as it has is enough
    assert found(reservation, NOW, history_days=4)[0] == []
    assert found(reservation, NOW, history_days=3)[0] == gpus


def recommendations_evaluate_found(reservation, **changes):
    return findings_evaluate(reservations=[reservation], now=NOW,
                             policy=policy().override(**changes))[reservation.id]


def test_the_history_is_the_teams_samples_of_the_class_not_the_reservations():
    """A team that held GPUs of the class for a week before this reservation has the
    history; another team's samples do not count for it."""
    world = World.create()
    earlier = world.reserve(count=1, start=NOW - 12 * DAY, end=NOW - 5 * DAY, now=NOW)
    [a] = assignments(earlier)
    stored(a, NOW - 12 * DAY, NOW - 5 * DAY, busy=lambda h: 3600 if h < NOW - 11 * DAY else 0)
    reservation = abandoned(world, days=2)
    assert found(reservation, NOW, history_days=9)[1] == {
        assignments(reservation)[0].gpu_id: ("idle", None)}  # 7 + 2 days
    other = abandoned(world, days=2, team=world.other_team)
    assert found(other, NOW, history_days=9)[1] == {
        assignments(other)[0].gpu_id: ("guarded", "history")}


def test_failed_hours_are_not_history(settings):
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 5 * DAY, end=NOW + DAY)
    [a] = assignments(reservation)
    stored(a, NOW - 5 * DAY, NOW)
    from gpuquota.usage.models import GpuHourUsage

    GpuHourUsage.objects.filter(gpu_id=a.gpu_id, hour__lt=NOW - 2 * DAY).update(failed=True)
    assert recommendations_evaluate_found(reservation, history_days=3).gpus[
        str(a.gpu_id)]["reason"] == "not enough history: 2 of 3 days"


def test_the_review_card_says_not_enough_history(settings):
    """One GPU unreported (a coverage warning, so the reservation has a card), one idle by
    both signals but kept by the gate: the card says why, in words."""
    settings.RECLAIM_HISTORY_DAYS = 7
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 3 * DAY, end=NOW + DAY)
    idle, unreported = assignments(reservation)
    stored(idle, NOW - 3 * DAY, NOW)
    recommendations_evaluate(now=NOW)
    assert not Recommendation.objects.filter(kind="reclaim").exists()
    [rec] = Recommendation.objects.filter(kind="coverage_warning")
    assert rec.evidence["gpus"][str(idle.gpu_id)]["guard"] == "history"
    client = Client()
    client.force_login(world.admin)
    body = client.get(reverse("reclaim_review")).content.decode()
    assert "guarded: history" in body
    assert "not enough history: 3 of 7 days" in body
    assert unreported.gpu_id != idle.gpu_id


def test_a_lent_gpu_is_never_reclaimed_and_the_evidence_says_so():
    world = World.create()
    reservation = abandoned(world, days=9, count=2)  # past the gate
    lent, other = assignments(reservation)
    loan = loan_lend(assignment=lent, at=NOW - 2 * H, reason="idle for the lending window")
    gpus, states = found(reservation, NOW)
    assert gpus == [other.gpu_id]
    assert states[lent.gpu_id] == ("guarded", "lent")
    assert recommendations_evaluate_found(reservation).gpus[str(lent.gpu_id)]["reason"] == (
        "lent now: lending already puts it to work")
    assert found(reservation, NOW, rule="spec")[0] == [lent.gpu_id, other.gpu_id]
    loan_return(loan=loan, reason="owner_ask", at=NOW - H)
    assert found(reservation, NOW)[0] == [lent.gpu_id, other.gpu_id]  # returned: it may go


def test_the_backtest_waits_for_the_history_and_skips_lent_gpus():
    world = World.create()
    reservation = abandoned(world, days=12, count=2)
    lent, other = assignments(reservation)
    loan_lend(assignment=lent, at=NOW - 12 * DAY + H, reason="idle for the lending window")

    def recommended(history_days: int) -> dict[int, object]:
        result = policy_backtest(policy=policy().override(history_days=history_days),
                                 days=12, now=NOW)
        return {g: rec.recommended_at for rec in result.recommendations for g in rec.gpu_ids}

    start = NOW - 12 * DAY
    assert recommended(0) == {other.gpu_id: start + DAY}  # after one look-back
    assert recommended(7) == {other.gpu_id: start + 7 * DAY}  # after seven days of samples


def test_a_right_size_is_held_back_by_the_same_guards(settings):
    """Three GPUs, one busy all the look-back, one its first half and one its second: two
    at once all along, so the spec's rule shrinks the reservation to two, giving back the
    first half's. The guarded rule does not take it: first for want of history, then
    because its run stopped early while the team works beside it; the right-size goes,
    with nothing left to give back, and the GPU's evidence says why."""
    from tests.reclaim.factories import busy_in, held_gpus, rollup, telemetry

    settings.RECLAIM_LOOKBACK_S = 6 * 3600
    world = World.create()
    reservation = world.reserve(count=3, start=NOW - 2 * DAY)
    g0, g1, g2 = held_gpus(reservation)
    telemetry(g0, start=NOW - 6 * H, end=NOW, util=80)
    telemetry(g1, start=NOW - 6 * H, end=NOW, util=busy_in([range(0, 180)]))
    telemetry(g2, start=NOW - 6 * H, end=NOW, util=busy_in([range(180, 360)]))
    rollup()
    spec = recommendations_evaluate_found(reservation, rule="spec").of_kind("right_size")
    assert (spec.target_count, spec.gpu_ids) == (2, [g1.id])
    held_back = recommendations_evaluate_found(reservation, history_days=5)
    assert held_back.of_kind("right_size") is None
    assert held_back.gpus[str(g1.id)]["reason"] == "not enough history: 0 of 5 days"
    at_work = recommendations_evaluate_found(reservation, history_days=0)
    assert at_work.of_kind("right_size") is None
    assert (at_work.gpus[str(g1.id)]["guard"], at_work.gpus[str(g1.id)]["state"]) == (
        "retry_gap", "in_use")
