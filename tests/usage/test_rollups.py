"""The rollup rule on hand-built samples (accounting.md: Usage samples)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import ClusterIdentity
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.conf import MAX_WINDOW_S
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.owners import OwnerResolver
from gpuquota.usage.rollup import usage_inputs_load
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import make_gpu
from tests.usage.factories import (
    T0,
    add_processes,
    add_samples,
    at,
    mig_device,
    minute_samples,
    reserve,
    team_with_user,
)

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def rows(gpu, hour=T0, **filters):
    gpu_hour_recompute(gpu_id=gpu.id, hour=hour)
    return list(
        GpuHourUsage.objects.filter(gpu=gpu, hour=hour, **filters)
        .order_by("kind", "team_id", "split_ways", "failed")
        .values("kind", "team_id", "split_ways", "failed", "covered_s", "busy_s",
                "util_weighted", "assignment_id", "process_count", "users_seen")
    )


def totals(gpu, hour=T0):
    found = rows(gpu, hour)
    return sum(r["covered_s"] for r in found), sum(r["busy_s"] for r in found)


def test_full_busy_hour_without_processes_is_unattributed():
    gpu = make_gpu()
    minute_samples(gpu, T0, 60, util="50.25")
    [row] = rows(gpu)
    assert row["kind"] == "unreserved" and row["team_id"] is None and row["split_ways"] == 1
    assert (row["covered_s"], row["busy_s"]) == (3600, 3600)
    assert row["util_weighted"] == Decimal("50.25") * 3600


def test_busy_threshold_is_exact_and_idle_seconds_are_covered():
    gpu = make_gpu()
    add_samples(gpu, [{"start": at(0), "util": "4.99"}, {"start": at(1), "util": "5.00"}])
    assert totals(gpu) == (120, 60)


def test_overlapping_sample_is_cut_at_next_window_start():
    gpu = make_gpu()
    add_samples(gpu, [{"start": at(0), "seconds": 60},
                      {"start": at(0) + timedelta(seconds=30), "seconds": 60}])
    # the first covers [0, 30), the second [30, 90)
    assert totals(gpu) == (90, 90)


def test_same_window_start_first_stored_wins():
    gpu = make_gpu()
    add_samples(gpu, [{"start": at(0), "util": 80}])
    add_samples(gpu, [{"start": at(0), "util": 1}])
    [row] = rows(gpu)
    assert row["util_weighted"] == Decimal(80 * 60)


def test_zero_readings_and_null_util_cover_nothing():
    gpu = make_gpu()
    add_samples(gpu, [
        {"start": at(0), "readings": 0, "util": 0},
        {"start": at(1), "util": None},
        {"start": at(2), "util": 30},
    ])
    assert totals(gpu) == (60, 60)


def test_gap_is_no_data():
    gpu = make_gpu()
    add_samples(gpu, [{"start": at(0)}, {"start": at(10)}])
    assert totals(gpu) == (120, 120)


def test_window_straddling_an_hour_splits_between_hours():
    gpu = make_gpu()
    add_samples(gpu, [{"start": at(59), "seconds": 120, "util": 40}])
    assert totals(gpu, T0) == (60, 60)
    assert totals(gpu, T0 + H) == (60, 60)


def test_reservation_edge_inside_an_hour():
    gpu = make_gpu()
    team, _ = team_with_user("vision", "alice", gpu.node.cluster)
    minute_samples(gpu, T0, 60)
    start = T0 + timedelta(minutes=30, seconds=20)
    assignment = reserve(team, gpu, start, T0 + 5 * H)
    found = rows(gpu)
    reserved = [r for r in found if r["kind"] == "reserved"]
    unreserved = [r for r in found if r["kind"] == "unreserved"]
    assert [(r["assignment_id"], r["team_id"], r["covered_s"]) for r in reserved] == [
        (assignment.id, team.id, 3600 - 1820)
    ]
    assert [(r["team_id"], r["covered_s"]) for r in unreserved] == [(None, 1820)]


def test_reservation_is_charged_from_approval():
    gpu = make_gpu()
    team, _ = team_with_user("vision", "alice", gpu.node.cluster)
    minute_samples(gpu, T0, 60)
    reserve(team, gpu, T0, T0 + 2 * H, approved_at=at(45))
    found = rows(gpu)
    assert {r["kind"]: r["covered_s"] for r in found} == {"unreserved": 2700, "reserved": 900}


def test_month_edge_rows_fall_in_their_own_hour():
    gpu = make_gpu()
    minute_samples(gpu, T0 + H + timedelta(minutes=30), 60)  # 23:30 Oct 31 → 00:30 Nov 1
    assert totals(gpu, T0 + H) == (1800, 1800)
    assert totals(gpu, T0 + 2 * H) == (1800, 1800)


def test_mig_devices_roll_into_parent():
    gpu = make_gpu()
    a, b = mig_device(gpu, 0), mig_device(gpu, 1)
    minute_samples(a, T0, 30, util=10)  # [0, 30)
    minute_samples(b, at(15), 30, util=80)  # [15, 45)
    minute_samples(b, at(50), 5, util=2)  # [50, 55): covered, idle
    [row] = rows(gpu)
    assert (row["covered_s"], row["busy_s"]) == (50 * 60, 45 * 60)
    assert row["util_weighted"] == Decimal(10 * 900 + 80 * 1800 + 2 * 300)
    assert not GpuHourUsage.objects.filter(gpu__in=[a, b]).exists()


def test_mig_owners_are_those_of_busy_devices():
    gpu = make_gpu()
    a, b = mig_device(gpu, 0), mig_device(gpu, 1)
    team_a, _ = team_with_user("ta", "alice", gpu.node.cluster)
    team_b, _ = team_with_user("tb", "bob", gpu.node.cluster)
    minute_samples(a, T0, 60, util=1)  # idle device with alice's process
    minute_samples(b, T0, 60, util=90)
    add_processes(a, T0, 60, user="alice")
    add_processes(b, T0, 30, user="bob")
    found = rows(gpu)
    # [0, 30): bob's busy device; [30, 60): busy device b has no process → unattributed
    assert [(r["team_id"], r["busy_s"]) for r in found] == [
        (team_b.id, 1800), (None, 1800)
    ] or [(r["team_id"], r["busy_s"]) for r in found] == [(None, 1800), (team_b.id, 1800)]
    assert team_a.id not in {r["team_id"] for r in found}


def test_failed_time_is_kept_apart():
    gpu = make_gpu()
    minute_samples(gpu, T0, 60)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=at(10),
                                     valid_until=at(20), reason="xid 79")
    found = rows(gpu)
    assert {r["failed"]: r["busy_s"] for r in found} == {True: 600, False: 3000}


def test_multi_owner_window_is_split_equally():
    gpu = make_gpu()
    team_a, _ = team_with_user("ta", "alice", gpu.node.cluster)
    team_b, _ = team_with_user("tb", "bob", gpu.node.cluster)
    minute_samples(gpu, T0, 60)
    add_processes(gpu, T0, 60, user="alice", pid=1)
    add_processes(gpu, T0, 20, user="bob", pid=2)
    add_processes(gpu, T0, 20, user="mallory", pid=3)  # unknown: not an owner team
    found = rows(gpu)
    shares = {(r["team_id"], r["split_ways"]): r["busy_s"] for r in found}
    # split among the distinct owner teams only (accounting.md: unreserved_busy_hours)
    assert shares == {(team_a.id, 2): 1200, (team_b.id, 2): 1200, (team_a.id, 1): 2400}
    # exact shares: alice's team 1200/2 + 2400 = 3000 s
    assert sum(Decimal(s) / n for (t, n), s in shares.items() if t == team_a.id) == 3000
    assert next(r for r in found if r["split_ways"] == 1)["users_seen"] == ["alice"]
    # each team's row names only its own users (another team may see that row)
    assert {(r["team_id"], tuple(r["users_seen"])) for r in found if r["split_ways"] == 2} == {
        (team_a.id, ("alice",)), (team_b.id, ("bob",))}


def test_unresolvable_process_is_not_an_extra_owner():
    gpu = make_gpu()
    team_a, _ = team_with_user("ta", "alice", gpu.node.cluster)
    minute_samples(gpu, T0, 10)
    add_processes(gpu, T0, 10, user="alice", pid=1)
    add_processes(gpu, T0, 10, user="mallory", pid=2)  # no identity: unattributed owner
    assert [(r["team_id"], r["split_ways"], r["busy_s"]) for r in rows(gpu)] == [
        (team_a.id, 1, 600)]
    other = make_gpu(index=1)
    minute_samples(other, T0, 10)
    add_processes(other, T0, 10, user="mallory", pid=3)  # only unresolvable: unattributed
    assert [(r["team_id"], r["split_ways"], r["busy_s"]) for r in rows(other)] == [
        (None, 1, 600)]


def test_slurm_account_wins_over_the_users_billing_team():
    gpu = make_gpu()
    team_a, _ = team_with_user("ta", "alice", gpu.node.cluster)
    physics, _ = team_with_user("physics", "nobody", gpu.node.cluster)
    ClusterIdentity.objects.create(cluster=gpu.node.cluster, kind="slurm_account",
                                   key="phys", team=physics, valid_from=T0 - 10 * H)
    minute_samples(gpu, T0, 10)
    add_processes(gpu, T0, 10, user="alice", account="phys")
    [row] = rows(gpu)
    assert row["team_id"] == physics.id and team_a.id != physics.id


def test_uid_identity_and_unattributed_without_billing_team():
    gpu = make_gpu()
    team_a, user = team_with_user("ta", "alice", gpu.node.cluster)
    ClusterIdentity.objects.create(cluster=gpu.node.cluster, kind="unix_uid", key="1012",
                                   user=user, valid_from=T0 - 10 * H)
    minute_samples(gpu, T0, 10)
    add_processes(gpu, T0, 10, user=None, uid=1012)
    assert [r["team_id"] for r in rows(gpu)] == [team_a.id]


def test_only_the_mappings_the_processes_name_are_read_for_the_same_owners(clock):
    """The rollup's owner resolver reads the mappings its processes name, not every
    account of the cluster (2,000 teams' at 100,000 GPUs, on each sweep round and each
    partial hour a page computes): the same owners as reading them all."""
    gpu = make_gpu()
    cluster = gpu.node.cluster
    team_a, user_a = team_with_user("ta", "alice", cluster)
    physics, _ = team_with_user("physics", "nobody", cluster)
    ClusterIdentity.objects.create(cluster=cluster, kind="slurm_account", key="phys",
                                   team=physics, valid_from=T0 - 10 * H)
    ClusterIdentity.objects.create(cluster=cluster, kind="unix_uid", key="1012", user=user_a,
                                   valid_from=T0 - 10 * H)
    for i in range(5):  # other teams' accounts and users on the cluster
        other, _ = team_with_user(f"other{i}", f"user{i}", cluster)
        ClusterIdentity.objects.create(cluster=cluster, kind="slurm_account", key=f"acct{i}",
                                       team=other, valid_from=T0 - 10 * H)
    minute_samples(gpu, T0, 40)
    add_processes(gpu, T0, 10, user="alice", pid=1)
    add_processes(gpu, at(10), 10, user="bob", account="phys", pid=2)
    add_processes(gpu, at(20), 10, user=None, uid=1012, pid=3)
    add_processes(gpu, at(30), 10, user="mallory", pid=4)  # no mapping: unattributed

    inputs = usage_inputs_load(gpu_ids=[gpu.id], start=T0, end=T0 + H)
    everything = OwnerResolver(cluster_ids={cluster.id}, start=T0 - timedelta(
        seconds=MAX_WINDOW_S), end=T0 + H)
    owners = [tuple(resolver.team_id(cluster_id=cluster.id, job_source=p.job_source,
                                     job_account=p.job_account, user=p.user, uid=p.uid,
                                     at_s=p.start) for resolver in (inputs.resolver, everything))
              for p in inputs.procs[gpu.id]]
    assert all(named == every for named, every in owners)
    assert {named for named, _every in owners} == {team_a.id, physics.id, None}
    assert set(inputs.resolver._identities) == {
        (cluster.id, "unix_user", "alice"), (cluster.id, "slurm_account", "phys"),
        (cluster.id, "unix_uid", "1012")}
    assert totals(gpu) == (2400, 2400)

    quiet = make_gpu(index=1)
    minute_samples(quiet, T0, 10)
    with CaptureQueriesContext(connection) as read:
        usage_inputs_load(gpu_ids=[quiet.id], start=T0, end=T0 + H)
    assert not [q for q in read.captured_queries if "clusteridentity" in q["sql"]]


def test_recompute_twice_gives_the_same_rows_and_outbox_drains():
    gpu = make_gpu()
    minute_samples(gpu, T0, 90)
    assert dirty_hours_process() == 2
    first = rows(gpu)
    assert rows(gpu) == first
    assert dirty_hours_process() == 0
    assert GpuHourUsage.objects.filter(gpu=gpu).count() == 2
