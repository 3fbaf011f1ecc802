"""Exactness of the fast rule and of the difference writer (issue 13, backfill): on the
same fixtures the rows the sweep stores are, to the second and the last bit of energy,
those of the rule as it was (`oracle_rollup`, the ORM and Decimal implementation), and
a recompute that changes nothing writes nothing."""

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import ClusterIdentity, Team
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.rates.services import rate_card_create
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup_rows import FIGURES, KEY
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, NodeFactory, make_gpu
from tests.usage import oracle_rollup
from tests.usage.factories import (
    T0,
    add_event,
    add_processes,
    add_samples,
    mig_device,
    reserve,
    team_with_user,
)
from tests.usage.oracle_days import assert_day_rows_are_the_hours_summed

pytestmark = pytest.mark.django_db
M, H, S = timedelta(minutes=1), timedelta(hours=1), timedelta(seconds=1)
HOURS = [T0 + h * H for h in range(3)]


def stored(gpu_ids) -> set[tuple]:
    """(hour, KEY..., FIGURES...) of the stored rows, users as a tuple."""
    return {(*row[:-1], tuple(row[-1])) for row in GpuHourUsage.objects.filter(
        gpu_id__in=gpu_ids).values_list("hour", *KEY, *FIGURES)}


def oracle(gpu_ids) -> set[tuple]:
    """The same, as the rule as it was computes them."""
    rows = set()
    for hour in HOURS:
        inputs = oracle_rollup.usage_inputs_load(gpu_ids=gpu_ids, start=hour, end=hour + H)
        for gpu_id in gpu_ids:
            for k, b in oracle_rollup.usage_buckets(inputs=inputs, gpu_id=gpu_id).items():
                rows.add((hour, gpu_id, k.kind, k.gpu_class_id, k.assignment_id,
                          k.reservation_id, k.team_id, k.split_ways, k.failed, k.rate_card_id,
                          b.covered_s, b.busy_s, b.util_weighted, b.energy_j,
                          b.memory_used_bytes_max, len(b.processes), tuple(sorted(b.users))))
    return rows


def _minutes(gpu, first: int, count: int, step: int = 1, **extra) -> None:
    add_samples(gpu, [{"start": T0 + (first + i * step) * M, "util": (7 * i) % 100,
                       "energy_j": 1000.0 / (i + 3), "memory_used_bytes_max": 10**9 + i,
                       **extra} for i in range(count)])


@pytest.fixture
def fleet():
    """GPUs of one node covering the rule's cases, with every mark swept."""
    node = NodeFactory()
    cluster = node.cluster
    team_a, alice = team_with_user("ta", "alice", cluster)
    team_b, _ = team_with_user("tb", "bob", cluster)
    gpus = {name: make_gpu(node=node, index=i) for i, name in enumerate(
        ("dense", "sparse", "mig", "failed", "reboot", "reserved", "split"))}
    # dense: every minute of three hours, a process every minute
    _minutes(gpus["dense"], 0, 180)
    add_processes(gpus["dense"], T0, 180, user="alice")
    # sparse: gaps, 30 s windows, overlaps, readings = 0, null util
    _minutes(gpus["sparse"], 3, 20, step=7)
    add_samples(gpus["sparse"], [
        {"start": T0 + 50 * M + 30 * S, "seconds": 30, "util": "4.99"},
        {"start": T0 + 70 * M, "seconds": 120, "util": "5.00"},
        {"start": T0 + 71 * M, "seconds": 60, "util": 80, "energy_j": 7.5},
        {"start": T0 + 90 * M, "readings": 0, "util": 0},
        {"start": T0 + 91 * M, "util": None}])
    add_processes(gpus["sparse"], T0 + 65 * M, 10, user="bob", pid=7)
    # MIG: three devices (energies of several devices add up), owners of the busy ones
    devices = [mig_device(gpus["mig"], i) for i in range(3)]
    for i, device in enumerate(devices):
        add_samples(device, [{"start": T0 + m * M, "util": (m * (i + 3)) % 40,
                              "energy_j": 0.1 * (m + i) + 1 / 3} for m in range(0, 150, i + 1)])
    add_processes(devices[0], T0, 100, user="alice")
    add_processes(devices[1], T0 + 20 * M, 100, user="bob", pid=200)
    # a failed interval inside an hour, recorded
    _minutes(gpus["failed"], 0, 120)
    GpuHealthInterval.objects.create(gpu=gpus["failed"], state="failed",
                                     valid_from=T0 + 70 * M, valid_until=T0 + 95 * M)
    # failed by an event, ended by a good sample after a reboot (health step of the sweep)
    _minutes(gpus["reboot"], 0, 20, boot="boot-1")
    add_event(gpus["reboot"], T0 + 10 * M, "gpu_lost", boot="boot-1")
    _minutes(gpus["reboot"], 40, 60, boot="boot-2")
    # reserved part of an hour, charged from its approval; on-demand outside it
    _minutes(gpus["reserved"], 0, 180)
    add_processes(gpus["reserved"], T0, 180, user="bob")
    reserve(team_a, gpus["reserved"], T0 + 30 * M, T0 + 130 * M,
            approved_at=T0 + 45 * M + 17 * S)
    # unreserved split among owner teams, a slurm account, an identity changing mid-hour
    _minutes(gpus["split"], 0, 180)
    add_processes(gpus["split"], T0, 180, user="alice", pid=1)
    add_processes(gpus["split"], T0 + 10 * M, 100, user="bob", pid=2)
    add_processes(gpus["split"], T0 + 40 * M, 60, user="carol", pid=3, account="physics",
                  source="slurm")
    add_processes(gpus["split"], T0 + 50 * M, 60, user="nobody", pid=4)
    ClusterIdentity.objects.create(cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                                   key="physics", team=team_b,
                                   valid_from=T0 + 75 * M + 20 * S)
    ClusterIdentity.objects.create(cluster=cluster, kind=ClusterIdentity.Kind.UNIX_USER,
                                   key="carol", user=alice, valid_from=T0 + 45 * M,
                                   valid_until=T0 + 125 * M)
    # a rate card change inside the second hour, for the class of them all
    klass = gpus["dense"].gpu_class
    for start, end in ((datetime(2026, 1, 1, tzinfo=UTC), T0 + 80 * M + 5 * S),
                       (T0 + 80 * M + 5 * S, None)):
        rate_card_create(gpu_class=klass, valid_from=start, valid_until=end,
                         reserved_rate="2.00", on_demand_rate="3.00", by=AdminFactory())
    while dirty_hours_process():
        pass
    return [gpu.id for gpu in gpus.values()]


def test_the_sweep_stores_the_rows_of_the_rule_as_it_was(fleet):
    rows = stored(fleet)
    assert rows == oracle(fleet)
    assert len({row[1] for row in rows}) == len(fleet)
    assert {row[2] for row in rows} == {"reserved", "unreserved"}  # and on-demand
    assert any(row[7] > 1 for row in rows) and any(row[8] for row in rows)  # split, failed
    assert len({row[9] for row in rows}) == 2  # both rate cards
    assert len({row[6] for row in rows}) == 3  # both teams and unattributed
    assert GpuHealthInterval.objects.filter(closed_reason__startswith="new boot").exists()
    assert_day_rows_are_the_hours_summed()  # two UTC days: Oct 31 and Nov 1


def test_a_change_updates_in_place_and_no_change_writes_nothing(fleet):
    before = {row[0]: row for row in GpuHourUsage.objects.values_list("id", "computed_at",
                                                                        *FIGURES)}
    for gpu_id in fleet:
        for hour in HOURS:
            gpu_hour_recompute(gpu_id=gpu_id, hour=hour)
    assert {row[0]: row for row in GpuHourUsage.objects.values_list(
        "id", "computed_at", *FIGURES)} == before  # same rows, same ids, not rewritten

    dense = fleet[0]
    add_samples(Gpu.objects.get(id=dense), [{"start": T0 + 59 * M + 30 * S, "seconds": 90,
                                      "util": 99, "energy_j": 0.3}])  # late, overlapping
    add_processes(Gpu.objects.get(id=dense), T0 + 59 * M + 30 * S, 1, user="alice")  # its own
    assert DirtyGpuHour.objects.filter(gpu_id=dense).exists()
    dirty_hours_process()
    after = {row[0]: row[1:] for row in GpuHourUsage.objects.filter(gpu_id=dense)
             .values_list("id", *FIGURES)}
    assert set(after) <= set(before)  # updated in place: the same rows
    assert any(after[row_id] != before[row_id][2:] for row_id in after)
    assert stored(fleet) == oracle(fleet)
    assert_day_rows_are_the_hours_summed()



def test_a_loan_gives_the_busy_seconds_to_the_borrowers_as_the_rule_says(fleet):
    from gpuquota.outbox.services import gpu_interval_mark_dirty
    from gpuquota.reservations.models import Assignment, Loan

    gpu_id = fleet[5]  # reserved by ta (alice's team), used by bob (tb) all along
    assignment = Assignment.objects.get(gpu_id=gpu_id)
    lent_from, returned_at = T0 + 50 * M + 7 * S, T0 + 110 * M + 41 * S  # across an hour
    Loan.objects.create(assignment=assignment, gpu_id=gpu_id, lent_from=lent_from,
                        returned_at=returned_at, end_reason="owner_ask")
    gpu_interval_mark_dirty(gpu_ids=[gpu_id], start=lent_from, end=returned_at)
    while dirty_hours_process():
        pass
    rows = stored(fleet)
    assert rows == oracle(fleet)
    borrowed = [row for row in rows if row[2] == "borrowed"]
    assert {row[6] for row in borrowed} == {Team.objects.get(slug="tb").id}
    assert {(row[4], row[10]) for row in borrowed} == {(assignment.id, 0)}  # busy only
    lent_s = int((returned_at - lent_from).total_seconds())
    busy_in_loan = sum(row[11] for row in borrowed)
    assert 0 < busy_in_loan < lent_s  # some of its minutes are below the busy threshold
    assert_day_rows_are_the_hours_summed()
