"""The hand-built scenarios of issue 10: what the evaluation recommends, and why."""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from gpuquota.rates.models import RateCard
from reclaim.conf import policy
from reclaim.models import Exemption, Recommendation
from reclaim.selectors import recommendations_list
from reclaim.services import recommendations_evaluate
from tests.reclaim.factories import DAY, GIB, NOW, World, busy_in, held_gpus, rollup, telemetry

K, S = Recommendation.Kind, Recommendation.Status
LOOKBACK = timedelta(hours=6)  # shortened (as the demo does) to keep the rollups few
M = 360  # minutes, and 60 s slots, in the look-back window
WINDOW = (NOW - LOOKBACK, NOW)
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _lookback(settings):
    settings.RECLAIM_LOOKBACK_S = int(LOOKBACK.total_seconds())
    # These scenarios test the spec's rule (accounting.md: the idle test, right-size,
    # coverage); the default guarded rule's are in test_guarded.py.
    settings.RECLAIM_RULE = "spec"


@pytest.fixture
def world():
    return World.create()


def day_of(gpu, util, **kw):
    telemetry(gpu, start=WINDOW[0], end=WINDOW[1], util=util, **kw)


def evaluate(**kw):
    counts = recommendations_evaluate(now=NOW, **kw)
    return counts, list(Recommendation.objects.order_by("id"))


def test_a_fully_idle_gpu_is_recommended_for_reclaim_with_evidence_and_savings(world):
    reservation = world.reserve(count=2)
    idle, used = held_gpus(reservation)
    day_of(idle, 0)
    day_of(used, 85)
    rollup()
    counts, recs = evaluate()
    assert counts["created"] == 1
    [rec] = recs
    assert (rec.kind, rec.status) == (K.RECLAIM, S.OPEN)
    assert list(rec.gpus.all()) == [idle]
    ev = rec.evidence["gpus"][str(idle.id)]
    assert ev["busy_fraction"] == "0.0000" and ev["coverage"] == "1.0000"
    assert ev["last_busy_at"] is None and ev["state"] == "idle"
    assert rec.evidence["gpus"][str(used.id)]["state"] == "in_use"
    # 48 h left of one GPU at 2.50 per GPU-hour
    assert (rec.savings, rec.currency) == (Decimal("120.00"), "USD")
    assert (rec.window_start, rec.window_end) == WINDOW


def test_a_notebook_holding_memory_at_zero_percent_is_idle(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    day_of(gpu, 0, memory=40 * GIB, user="alice")
    rollup()
    _counts, [rec] = evaluate()
    ev = rec.evidence["gpus"][str(gpu.id)]
    assert rec.kind == K.RECLAIM
    assert ev["memory_used_bytes_max"] == 40 * GIB
    assert ev["users_seen"] == ["alice"] and ev["process_count"] >= 1
    assert ev["mean_util_gpu"] == "0.0000"


def test_a_bursty_job_with_short_gaps_is_not_idle(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    # 9 busy minutes in every hour: 15 % busy, gaps shorter than the look-back
    day_of(gpu, lambda i: 90 if i % 60 < 9 else 0)
    rollup()
    counts, recs = evaluate()
    assert recs == [] and counts["reservations"] == 1


def test_just_under_the_idle_fraction_is_idle_and_at_it_is_not(world):
    a, b = held_gpus(world.reserve(count=2))
    day_of(a, busy_in([range(35)]))   # 35 / 360 < 0.10
    day_of(b, busy_in([range(36)]))   # 36 / 360 = 0.10: not idle
    rollup()
    _counts, [rec] = evaluate()
    assert list(rec.gpus.all()) == [a]


def test_too_little_coverage_gives_a_warning_and_no_recommendation(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    telemetry(gpu, start=NOW - timedelta(hours=3), end=NOW, util=0)  # half the window
    rollup()
    _counts, [rec] = evaluate()
    assert rec.kind == K.COVERAGE_WARNING
    assert rec.evidence["gpus"][str(gpu.id)]["coverage"] == "0.5000"
    assert rec.savings is None


@pytest.mark.parametrize(("triple_slots", "target"), [(18, 2), (19, 3)])
def test_right_size_to_the_nearest_rank_95th_percentile(world, triple_slots, target):
    reservation = world.reserve(count=4)
    g0, g1, g2, g3 = held_gpus(reservation)
    day_of(g0, 80)
    day_of(g1, busy_in([range(0, 162)]))
    day_of(g2, busy_in([range(198, 360)]))
    day_of(g3, busy_in([range(0, triple_slots), range(162, 198)]))
    rollup()
    # concurrency: 3 in `triple_slots` of 360 slots, 2 in the others; the nearest rank of
    # the 95th percentile is the 342nd smallest: 2 with 18 slots of 3, 3 with 19
    _counts, [rec] = evaluate()
    assert (rec.kind, rec.target_count) == (K.RIGHT_SIZE, target)
    assert rec.evidence["concurrency"]["value"] == target
    assert rec.evidence["concurrency"]["histogram"] == {
        "2": M - triple_slots, "3": triple_slots}
    expected = [g3, g1] if target == 2 else [g3]  # the least busy go
    assert set(rec.gpus.all()) == set(expected)
    assert rec.savings == Decimal("120.00") * len(expected)


def test_over_quota_reservations_are_listed_first_then_by_savings(world):
    small = world.reserve(count=1, end=NOW + DAY)             # in quota, 24 h left
    big = world.reserve(count=1, end=NOW + 3 * DAY)           # in quota, 72 h left
    over = world.reserve(count=3, team=world.other_team)      # 3 of 4: in quota...
    over.over_quota = True  # ...recorded over quota, as an approved over-quota request is
    over.save(update_fields=["over_quota"])
    for r in (small, big, over):
        for gpu in held_gpus(r):
            day_of(gpu, 0)
    rollup()
    evaluate()
    ordered = [r.reservation_id for r in recommendations_list(statuses=[S.OPEN])]
    assert ordered == [over.id, big.id, small.id]


def test_savings_across_a_rate_change_are_rounded_once(world):
    RateCard.objects.all().delete()
    change = NOW + DAY + timedelta(minutes=30, seconds=15)
    RateCard.objects.create(gpu_class=world.gpu_class, valid_from=NOW - 10 * DAY,
                            valid_until=change, reserved_rate=Decimal("2.3333"),
                            on_demand_rate=Decimal("3"), borrowed_rate=Decimal("1.50"))
    RateCard.objects.create(gpu_class=world.gpu_class, valid_from=change,
                            reserved_rate=Decimal("4.1001"), on_demand_rate=Decimal("5"),
                            borrowed_rate=Decimal("2.50"))
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    day_of(gpu, 0)
    rollup()
    _counts, [rec] = evaluate()
    before = int((change - NOW).total_seconds())
    after = 2 * 86400 - before
    exact = (before * Decimal("2.3333") + after * Decimal("4.1001")) / 3600
    assert rec.savings == exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    rounded_per_rate = sum(
        (s * r / 3600).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        for s, r in ((before, Decimal("2.3333")), (after, Decimal("4.1001"))))
    assert rec.savings != rounded_per_rate  # one rounding, not one per rate


def test_an_exempt_reservation_is_listed_but_marked(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    day_of(gpu, 0)
    rollup()
    exemption = Exemption.objects.create(reservation=reservation, reason="benchmark",
                                         until=NOW + DAY, created_by=world.admin,
                                         created_at=NOW - DAY)
    _counts, [rec] = evaluate()
    assert rec.exemption == exemption and rec.kind == K.RECLAIM


def test_re_evaluation_never_duplicates_and_closes_what_no_longer_holds(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    day_of(gpu, 0)
    telemetry(gpu, start=NOW, end=NOW + timedelta(hours=1), util=90)
    rollup()
    evaluate()
    counts, [rec] = evaluate()
    assert counts == {"reservations": 1, "created": 0, "updated": 1, "closed": 0}
    # an hour later the GPU has been busy for a sixth of the window
    later = recommendations_evaluate(now=NOW + timedelta(hours=1))
    rec.refresh_from_db()
    assert later["closed"] == 1 and rec.status == S.CLOSED
    assert "No longer holds" in rec.closed_note


def test_a_dismissed_recommendation_stays_quiet_until_its_snooze_ends(world):
    from reclaim.lifecycle import recommendation_dismiss

    reservation = world.reserve(count=1, end=NOW + 5 * DAY)
    [gpu] = held_gpus(reservation)
    telemetry(gpu, start=NOW - LOOKBACK, end=NOW + 3 * LOOKBACK, util=0, window_s=600)
    rollup()
    _counts, [rec] = evaluate()
    recommendation_dismiss(recommendation=rec, actor=world.admin, reason="known: demo box",
                           snooze=2 * LOOKBACK, now=NOW)
    assert recommendations_evaluate(now=NOW + LOOKBACK)["created"] == 0
    assert recommendations_evaluate(now=NOW + 2 * LOOKBACK)["created"] == 1
    assert Recommendation.objects.filter(status=S.OPEN).count() == 1


def test_the_policy_is_read_from_settings(settings):
    settings.RECLAIM_LOOKBACK_S = 3600
    settings.RECLAIM_IDLE_BUSY_FRACTION = "0.2"
    assert policy().lookback == timedelta(hours=1)
    assert policy().idle_busy_fraction == Decimal("0.2")
