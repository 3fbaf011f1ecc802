"""Utilization versus allocation, exact at hour, month and arbitrary edges."""

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    on_demand_busy_seconds,
    period_to_date,
    team_reservations_utilization,
    team_utilization,
    unreserved_busy_by_team,
)
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import TeamFactory, make_gpu
from tests.usage.factories import (
    T0,
    add_processes,
    class_figures,
    minute_samples,
    reservation_figures,
    reserve,
    team_with_user,
)

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)
OCT, NOV = Period.month(2026, 10), Period.month(2026, 11)


def test_reservation_across_a_month_edge_is_exact_in_each_month():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0 + H, 120, util=60)  # 23:00 Oct 31 → 01:00 Nov 1, all busy
    start = datetime(2026, 10, 31, 23, 30, 20, tzinfo=UTC)
    end = datetime(2026, 11, 1, 0, 40, 10, tzinfo=UTC)
    assignment = reserve(team, gpu, start, end)
    dirty_hours_process()
    october = reservation_figures(assignment.reservation, OCT)
    november = reservation_figures(assignment.reservation, NOV)
    assert (october.reserved_s, october.sums.busy_s, october.sums.covered_s) == (1780, 1780, 1780)
    assert (november.reserved_s, november.sums.busy_s) == (2410, 2410)
    assert november.utilization == 1 and november.coverage == 1
    assert november.mean_util_gpu == 60
    assert team_utilization(team=team, period=NOV).reserved_s == 2410
    assert class_figures(gpu.gpu_class, NOV).sums.busy_s == 2410
    # outside the reservation the GPU was busy unreserved and unattributed
    assert unreserved_busy_by_team(period=OCT) == {None: Fraction(1800 + 20)}


def test_arbitrary_edges_equal_the_sum_of_their_parts():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 180, util=30)
    minute_samples(gpu, T0 + 3 * H, 10, util=1)
    assignment = reserve(team, gpu, T0 + timedelta(minutes=50, seconds=7), T0 + 2 * H)
    dirty_hours_process()
    whole = fleet_utilization(period=Period(T0, T0 + 4 * H))
    cut = T0 + timedelta(hours=1, minutes=17, seconds=13)
    left = fleet_utilization(period=Period(T0, cut))
    right = fleet_utilization(period=Period(cut, T0 + 4 * H))
    assert whole.sums.busy_s == left.sums.busy_s + right.sums.busy_s == 3 * 3600
    assert whole.sums.covered_s == 3 * 3600 + 600
    inner = reservation_figures(assignment.reservation, Period(T0 + timedelta(minutes=55), cut))
    assert inner.reserved_s == inner.sums.busy_s
    assert inner.reserved_s == int((cut - (T0 + timedelta(minutes=55))).total_seconds())


def test_reserved_gpu_with_a_silent_agent_is_reserved_with_no_coverage():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    assignment = reserve(team, gpu, T0, T0 + 2 * H)
    dirty_hours_process()
    figures = reservation_figures(assignment.reservation, OCT)
    assert figures.reserved_s == 7200
    assert figures.coverage == 0 and figures.utilization == 0 and figures.mean_util_gpu is None
    assert figures.as_dict()["reserved_hours"] == "2.00"


def test_failed_reserved_seconds_come_from_health_intervals():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 60)
    assignment = reserve(team, gpu, T0, T0 + 2 * H)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + timedelta(minutes=90),
                                     valid_until=None, reason="gpu_lost")
    GpuHealthInterval.objects.create(gpu=gpu, state="degraded", valid_from=T0,
                                     valid_until=T0 + timedelta(minutes=90), reason="xid 63")
    dirty_hours_process()
    figures = reservation_figures(assignment.reservation, OCT)
    assert figures.failed_reserved_s == 1800 and figures.reserved_s == 7200
    fleet = fleet_utilization(period=Period(T0, T0 + 2 * H))
    assert fleet.in_service_s == 7200 and fleet.failed_s == 1800
    assert fleet.utilization == Fraction(3600, 5400)


def test_unreserved_shares_and_on_demand_groups_are_exact():
    gpu = make_gpu()
    team_a, _ = team_with_user("ta", "alice", gpu.node.cluster)
    team_b, _ = team_with_user("tb", "bob", gpu.node.cluster)
    team_c, _ = team_with_user("tc", "carol", gpu.node.cluster)
    minute_samples(gpu, T0, 60)
    add_processes(gpu, T0, 60, user="alice", pid=1)
    add_processes(gpu, T0, 1, user="bob", pid=2)
    add_processes(gpu, T0, 1, user="carol", pid=3)
    dirty_hours_process()
    shares = unreserved_busy_by_team(period=OCT)
    assert shares == {team_a.id: Fraction(20) + 3540, team_b.id: 20, team_c.id: 20}
    groups = on_demand_busy_seconds(period=OCT)
    assert {(g["team_id"], g["split_ways"]): g["busy_s"] for g in groups} == {
        (team_a.id, 1): 3540, (team_a.id, 3): 60, (team_b.id, 3): 60, (team_c.id, 3): 60,
    }
    # partial period from samples gives the same split
    partial = unreserved_busy_by_team(period=Period(T0, T0 + timedelta(seconds=90)))
    assert partial == {team_a.id: 20 + 30, team_b.id: 20, team_c.id: 20}


def test_fleet_and_class_figures_and_to_date():
    gpu = make_gpu()
    make_gpu(node=gpu.node, gpu_class=gpu.gpu_class, index=1)
    minute_samples(gpu, T0, 60, util=50)
    dirty_hours_process()
    fleet = fleet_utilization(period=Period(T0, T0 + H))
    assert fleet.in_service_s == 7200 and fleet.utilization == Fraction(1, 2)
    [(klass, figures)] = classes_utilization(period=Period(T0, T0 + H))
    assert klass == gpu.gpu_class and figures.utilization == Fraction(1, 2)
    now = T0 + timedelta(minutes=30, microseconds=5)
    assert period_to_date(OCT, now).end == T0 + timedelta(minutes=30)


@pytest.mark.parametrize("count", [1, 6])
def test_team_page_selector_has_bounded_queries(count, django_assert_max_num_queries):
    team = TeamFactory(slug="vision")
    gpus = [make_gpu(index=i) for i in range(count)]
    for i, gpu in enumerate(gpus):
        minute_samples(gpu, T0, 30 + i)
        reserve(team, gpu, T0 + timedelta(minutes=7), T0 + 3 * H)
    dirty_hours_process()
    period = Period(T0 + timedelta(minutes=5), T0 + timedelta(hours=2, minutes=3))
    with django_assert_max_num_queries(30):
        result = team_reservations_utilization(team=team, period=period)
    assert len(result) == count
    assert result[0].figures.reserved_s == int((period.end - (T0 + timedelta(minutes=7)))
                                               .total_seconds())
    assert result[0].figures.sums.busy_s == 23 * 60


def test_reservation_gpu_usage_per_gpu_for_reclaim():
    from gpuquota.reservations.models import Assignment
    from gpuquota.usage.selectors import reservation_gpu_usage

    team = TeamFactory(slug="vision")
    gpu, idle = make_gpu(index=0), make_gpu(index=1)
    minute_samples(gpu, T0, 120, util=90, memory_used_bytes_max=7 * 2**30)
    minute_samples(idle, T0, 120, util=1)
    add_processes(gpu, T0, 120, user="alice")
    assignment = reserve(team, gpu, T0, T0 + 3 * H)
    Assignment.objects.create(reservation=assignment.reservation, gpu=idle, assigned_from=T0,
                              assigned_until=T0 + 3 * H)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0,
                                     valid_until=T0 + timedelta(minutes=10), reason="xid 79")
    dirty_hours_process()
    dirty_hours_process()
    period = Period(T0 + timedelta(minutes=5), T0 + timedelta(minutes=100))
    usage = reservation_gpu_usage(reservation=assignment.reservation, period=period)
    assert usage[gpu.id].covered_s == usage[gpu.id].busy_s == 90 * 60  # failed time left out
    assert usage[gpu.id].mean_util_gpu == 90 and usage[gpu.id].users_seen == {"alice"}
    assert usage[gpu.id].memory_used_bytes_max == 7 * 2**30
    assert usage[idle.id].covered_s == 95 * 60 and usage[idle.id].busy_fraction == 0


def test_public_reserved_and_failed_seconds_for_chargeback():
    from gpuquota.usage.selectors import failed_reserved_seconds, reserved_seconds

    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    reserve(team, gpu, T0 + timedelta(seconds=7), T0 + 3 * H)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + H,
                                     valid_until=T0 + H + timedelta(seconds=45), reason="x")
    assert reserved_seconds(period=OCT) == 2 * 3600 - 7
    assert reserved_seconds(period=NOV) == 3600
    assert reserved_seconds(period=OCT, group="reservation__team_id") == {team.id: 7193}
    assert failed_reserved_seconds(period=OCT, reservation__team=team) == 45


def test_class_figures_follow_the_class_in_force_then():
    """A GPU reclassified mid-period: its in-service and failed seconds before the change
    stay with the old class (accounting.md, Inventory: class intervals)."""
    from gpuquota.inventory.services import gpu_reclassify
    from tests.factories import GpuClassFactory

    gpu = make_gpu()
    old_class, new_class = gpu.gpu_class, GpuClassFactory(name="L4-reclassified")
    minute_samples(gpu, T0, 60, util=50)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + 20 * M,
                                     valid_until=T0 + 40 * M, reason="xid 79")
    gpu_reclassify(gpu=gpu, gpu_class=new_class, at=T0 + 30 * M)
    dirty_hours_process()
    by_class = {k: f for k, f in classes_utilization(period=Period(T0, T0 + H))}
    assert (by_class[old_class].in_service_s, by_class[old_class].failed_s) == (1800, 600)
    assert (by_class[new_class].in_service_s, by_class[new_class].failed_s) == (1800, 600)
    assert by_class[old_class].sums.ok_busy_s == by_class[new_class].sums.ok_busy_s == 1200
    assert by_class[old_class].utilization == Fraction(1200, 1200)


def test_reserved_figures_count_failed_time_fleet_and_on_demand_leave_it_out():
    """Covered and busy inside reserved assignments include failed time (credited on the
    statement, not hidden); fleet utilization is over non-failed seconds; busy time while
    failed is never charged on demand."""
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 60, util=40)
    minute_samples(gpu, T0 + H, 60, util=80)
    assignment = reserve(team, gpu, T0, T0 + H)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + 30 * M,
                                     valid_until=T0 + 90 * M, reason="xid 79")
    dirty_hours_process()
    period = Period(T0, T0 + 2 * H)
    figures = reservation_figures(assignment.reservation, period)
    assert (figures.reserved_s, figures.failed_reserved_s) == (3600, 1800)
    assert (figures.sums.covered_s, figures.sums.busy_s) == (3600, 3600)
    assert figures.utilization == 1 and figures.mean_util_gpu == 40
    fleet = fleet_utilization(period=period)
    assert (fleet.in_service_s, fleet.failed_s) == (7200, 3600)
    assert fleet.utilization == Fraction(1800 + 1800, 3600)
    assert unreserved_busy_by_team(period=period) == {None: 1800}
    assert on_demand_busy_seconds(period=period) == [
        {"team_id": None, "gpu_class_id": gpu.gpu_class_id, "split_ways": 1, "busy_s": 1800}]


def test_edge_hour_owner_uses_the_mapping_in_force_at_the_process_window():
    """A period edge inside a process window whose mapping ended before the edge: the
    owner is resolved as the hourly rollup does, so parts add up to the whole."""
    from accounts.models import ClusterIdentity

    gpu = make_gpu()
    physics = TeamFactory(slug="physics")
    ClusterIdentity.objects.create(cluster=gpu.node.cluster, kind="slurm_account", key="phys",
                                   team=physics, valid_from=T0 - H,
                                   valid_until=T0 + timedelta(seconds=30))
    minute_samples(gpu, T0, 2)
    add_processes(gpu, T0, 2, user=None, account="phys")
    dirty_hours_process()
    whole = unreserved_busy_by_team(period=Period(T0, T0 + H))
    left = unreserved_busy_by_team(period=Period(T0, T0 + timedelta(seconds=45)))
    right = unreserved_busy_by_team(period=Period(T0 + timedelta(seconds=45), T0 + H))
    assert whole == {physics.id: 60, None: 60}
    assert left == {physics.id: 45} and right == {physics.id: 15, None: 60}


def test_partial_hours_older_than_raw_retention_are_refused_not_short(monkeypatch):
    """Only whole hours survive raw-sample expiry: a partial edge there is refused."""
    from gpuquota.core.errors import DomainError
    from gpuquota.ingest import conf as ingest_conf

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 90)
    old = datetime(2025, 1, 6, 10, tzinfo=UTC)
    with pytest.raises(DomainError, match="expired"):
        on_demand_busy_seconds(period=Period(old + timedelta(seconds=1), old + 2 * H))
    with pytest.raises(DomainError, match="expired"):
        fleet_utilization(period=Period(old, old + timedelta(minutes=5)))
    assert on_demand_busy_seconds(period=Period(old, old + 2 * H)) == []
    assert fleet_utilization(period=Period.month(2025, 1)).sums.busy_s == 0


def test_reserved_seconds_follow_the_class_in_force_then():
    """A GPU reclassified while assigned: its reserved and failed reserved seconds split
    at the change, per class, for chargeback and the class figures."""
    from gpuquota.inventory.services import gpu_reclassify
    from gpuquota.usage.selectors import (
        failed_reserved_seconds_by_class,
        reserved_seconds_by_class,
    )
    from tests.factories import GpuClassFactory

    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    old_class, new_class = gpu.gpu_class, GpuClassFactory(name="H100-reclassified")
    minute_samples(gpu, T0, 60, util=50)
    assignment = reserve(team, gpu, T0 + 5 * M, T0 + H)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + 20 * M,
                                     valid_until=T0 + 40 * M, reason="xid 79")
    gpu_reclassify(gpu=gpu, gpu_class=new_class, at=T0 + 30 * M)
    dirty_hours_process()
    period = Period(T0, T0 + H)
    assert reserved_seconds_by_class(period=period, reservation__team=team) == {
        old_class.id: 1500, new_class.id: 1800}
    assert failed_reserved_seconds_by_class(period=period) == {
        old_class.id: 600, new_class.id: 600}
    old, new = (class_figures(k, period) for k in (old_class, new_class))
    assert (old.reserved_s, old.failed_reserved_s, old.sums.busy_s) == (1500, 600, 1500)
    assert (new.reserved_s, new.failed_reserved_s, new.sums.busy_s) == (1800, 600, 1800)
    assert old.reserved_s + new.reserved_s == reservation_figures(
        assignment.reservation, period).reserved_s
    by_class = dict(classes_utilization(period=period))
    assert by_class[new_class].reserved.reserved_s == 1800
