"""The policy backtest on stored history, the fleet figures, and the per-slot
concurrency read (a GPU counts in a 60 s slot when busy at least 30 s of it)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Q
from django.utils import timezone

from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reservations.models import Assignment
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.slots import concurrency_per_slot, gpu_busy_slots, nearest_rank_percentile
from reclaim.backtest import policy_backtest
from reclaim.conf import policy
from reclaim.models import Recommendation, RecommendationGpu
from reclaim.selectors import reclaim_figures
from tests.reclaim.factories import DAY, NOW, World, held_gpus, telemetry

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def stored_hours(assignment: Assignment, start, end, busy) -> None:
    """Rollup rows of one assignment, hour by hour: `busy(hour)` busy seconds of 3600."""
    rows, hour = [], start
    while hour < end:
        rows.append(GpuHourUsage(
            gpu_id=assignment.gpu_id, hour=hour, gpu_class_id=assignment.gpu.gpu_class_id,
            kind="reserved", assignment=assignment, reservation_id=assignment.reservation_id,
            team_id=assignment.reservation.team_id, covered_s=3600, busy_s=busy(hour),
            util_weighted=Decimal(80 * busy(hour)), computed_at=timezone.now()))
        hour += H
    GpuHourUsage.objects.bulk_create(rows)


def test_backtest_counts_recommendations_returned_hours_and_false_reclaims():
    world = World.create(gpus=4)
    a_res = world.reserve(count=2, start=NOW - 3 * DAY, end=NOW + DAY)
    a, b = a_res.assignments.select_related("gpu", "reservation").order_by("gpu_id")
    stored_hours(a, NOW - 3 * DAY, NOW, lambda h: 3600 if (
        h < NOW - 3 * DAY + 12 * H or h >= NOW - 12 * H) else 0)  # idle, then busy again
    stored_hours(b, NOW - 3 * DAY, NOW, lambda h: 3600)
    b_res = world.reserve(count=1, start=NOW - DAY, end=NOW + DAY)
    [c] = b_res.assignments.select_related("gpu", "reservation")
    stored_hours(c, NOW - DAY, NOW, lambda h: 0)
    # the spec's rule: its arithmetic is what this counts (the guarded default's backtest
    # is in test_guarded.py); the GPUs here hold nothing, so only its guards would differ
    tuned = policy().override(lookback=6 * H, grace=2 * H, rule="spec")

    result = policy_backtest(policy=tuned, days=2, now=NOW)

    # a: idle over [−54 h, −48 h) → recommended at −48 h, released at −46 h, 70 h to its
    # end, busy again from −12 h: a false reclaim. c: recommended at −18 h, 40 h returned.
    assert [(r.reservation_id, r.recommended_at) for r in result.recommendations] == [
        (a_res.id, NOW - 48 * H), (b_res.id, NOW - 18 * H)]
    assert result.gpus_released == 2
    assert result.gpu_hours_returned == Decimal(110)
    assert result.false_reclaims == 1 and result.false_reclaim_rate == Decimal("0.5")
    assert result.savings_amount == Decimal("275.00")  # 110 h × 2.50
    # an admin tightening the threshold to nothing recommends nothing
    assert policy_backtest(policy=tuned.override(idle_busy_fraction=Decimal(0)), days=2,
                           now=NOW).recommendations == []


def test_fleet_figures_reclaimable_now_and_reclaimed_this_month():
    world = World.create(gpus=4)
    now = NOW.replace(day=20)
    open_res = world.reserve(count=2, start=now - 2 * DAY, end=now + 2 * DAY, now=now)
    gpu = held_gpus(open_res)[0]
    rec = Recommendation.objects.create(
        reservation=open_res, kind="reclaim", window_start=now - DAY, window_end=now,
        evaluated_at=now, created_at=now, updated_at=now, savings=Decimal("120.00"))
    RecommendationGpu.objects.create(recommendation=rec, gpu=gpu)
    done_res = world.reserve(count=1, start=now - 2 * DAY, end=now + DAY, now=now)
    released = Recommendation.objects.create(
        reservation=done_res, kind="reclaim", status="released", window_start=now - DAY,
        window_end=now, evaluated_at=now, created_at=now, updated_at=now,
        accepted_at=now - DAY, grace_until=now - DAY + 4 * H, released_at=now - DAY + 4 * H)
    RecommendationGpu.objects.create(recommendation=released, gpu=held_gpus(done_res)[0],
                                     state="released", released_at=now - DAY + 4 * H)

    figures = reclaim_figures(now=now)

    assert figures.reclaimable_gpus == 1
    assert figures.reclaimable_gpu_hours == Decimal(48)
    assert figures.reclaimable_savings == Decimal("120.00")
    assert figures.reclaimed_gpu_hours == Decimal(44)  # from the release to the end
    assert figures.saved == Decimal("110.00") and figures.currency == "USD"


def test_a_gpu_counts_in_a_slot_when_busy_at_least_30_seconds_of_it():
    world = World.create(gpus=4)
    reservation = world.reserve(count=3, start=NOW - DAY, end=NOW + DAY)
    half, third, failing = held_gpus(reservation)
    start = NOW - 10 * timedelta(minutes=1)
    telemetry(half, start=start, end=NOW, window_s=30, util=lambda i: 50 if i % 2 == 0 else 0)
    telemetry(third, start=start, end=NOW, window_s=20,
              util=lambda i: 50 if i % 3 == 0 else 0)
    telemetry(failing, start=start, end=NOW, util=90)
    GpuHealthInterval.objects.create(gpu=failing, state="failed", reason="xid 79",
                                     valid_from=NOW - 5 * timedelta(minutes=1))
    slots = gpu_busy_slots(gpu_ids=[half.id, third.id, failing.id], start=start, end=NOW,
                           assignment_filter=Q(reservation=reservation))
    assert slots[half.id].busy_slots(min_busy_s=30) == set(slots[half.id].busy_by_slot)
    assert len(slots[half.id].busy_by_slot) == 10
    assert slots[third.id].busy_slots(min_busy_s=30) == set()  # 20 s of each minute
    assert len(slots[failing.id].busy_by_slot) == 5 and slots[failing.id].failed_s == 300
    assert concurrency_per_slot(slots=slots, start=start, end=NOW) == [2] * 5 + [1] * 5
    assert slots[half.id].last_busy_at == NOW - timedelta(seconds=30)


def test_nearest_rank_percentile():
    assert nearest_rank_percentile([], 95) is None
    assert nearest_rank_percentile([3, 1, 2], 95) == 3
    values = [0] * 95 + [7] * 5
    assert nearest_rank_percentile(values, 95) == 0
    assert nearest_rank_percentile(values + [7], 95) == 7
