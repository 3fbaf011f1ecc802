"""The lending simulation (bench/lending.py) on a tiny workload: it runs through the
product's services, prints a well-formed RESULT line, and its invariants hold: owner work
is never lost under lending, every owner's job gets its GPU back within the notice, a GPU
with its team's process (inference below the busy threshold) is never lent, a failing GPU's
loan ends with it, and the fleet's busy time (read from the product's rollups) is the
owners' plus the borrowers'. The shipped workloads fit their fleets."""

import re
from datetime import timedelta

import pytest

from bench.lending import WORKLOADS, result_line, simulate, workload_load
from bench.workloads import DAY
from gpuquota.reservations.models import Loan

RESULT = re.compile(
    r"^RESULT workload=(\S+) policy=(none|reclaim|lending|both) fleet_busy=(\d+\.\d) "
    r"owner_lost_gpu_h=(\d+\.\d) return_p99_s=(\d+) borrower_lost_share=(\d+\.\d) "
    r"false_reclaim_share=(\d+\.\d) return_model=(soak|modelled) modelled=(\S+)$")


@pytest.mark.postgres
@pytest.mark.django_db
def test_tiny_lending_run_keeps_its_invariants():
    figures = simulate(spec="bench.workloads.tiny:workload", policy="lending", days=1, seed=7,
                       lend_after_idle_s=1800, batch_s=600, reconcile_s=60)
    match = RESULT.match(result_line(figures))
    assert match, result_line(figures)
    assert match.group(1) == "tiny" and match.group(2) == "lending"
    assert figures["owner_lost_gpu_h"] == 0
    # team 0 comes back at 12:00 on both GPUs it lent: two returns, ended by the product's
    # observation of slurmctld (owner_job), each within what the soak measured plus the
    # KillWait of a borrower that ignores SIGTERM
    returns = list(Loan.objects.filter(end_reason="owner_job"))
    assert len(returns) == 2 == figures["returns"]
    assert all(r.freed_at - r.returned_at <= timedelta(seconds=1 + 30) for r in returns)
    assert 0 <= figures["return_p99_s"] <= 31
    assert match.group(8) == "soak" and "owner_wait=soak-sampled" in match.group(9)
    assert {r.returned_at.hour for r in returns} == {12}
    # the inference GPU (team 1's process at 3 %) is never lent; the failing GPU's loan
    # ends when it fails, at 18:00
    inference = Loan.objects.filter(assignment__reservation__team__slug="team-1")
    assert not inference.exists()
    failed = Loan.objects.get(end_reason="gpu_failed")
    assert failed.returned_at.hour == 18
    # lent after 30 idle minutes: 3 h of training, then lent at 03:30 at the latest
    first = Loan.objects.order_by("lent_from").first()
    assert first.lent_from.hour == 3 and first.lent_from.minute <= 40
    # fleet busy from the rollups = owners' busy (2 GPUs x 5 h) + borrowers' run time
    # (to the minute the samples have)
    assert abs(figures["busy_gpu_h"] - 10 - figures["borrower_run_gpu_h"]) <= 0.5
    assert figures["fleet_busy"] > 0.35  # without lending: 10 of 96 GPU-h, 10.4 %
    assert 0 < figures["borrower_lost_share"] <= 0.10


def test_result_line_format():
    line = result_line({"workload": "w", "policy": "both", "fleet_busy": 0.61234,
                        "owner_lost_gpu_h": 0, "return_p99_s": 181,
                        "borrower_lost_share": 0.0712, "false_reclaim_share": 0.0149,
                        "stop_model": "modelled"})
    assert line == ("RESULT workload=w policy=both fleet_busy=61.2 owner_lost_gpu_h=0.0 "
                    "return_p99_s=181 borrower_lost_share=7.1 false_reclaim_share=1.5 "
                    "return_model=modelled modelled=owner_wait=reconcile_tick+stop_s,"
                    "borrower_work,owner_demand,telemetry")
    assert RESULT.match(line)


@pytest.mark.parametrize("spec", WORKLOADS)
def test_shipped_workloads_fit_their_fleet(spec):
    """Runs lie inside their reservations, one per GPU, and at no hour are more GPUs
    reserved than installed (the reservation service would refuse the rest)."""
    days = 7
    w = workload_load(spec, days=days, seed=7)
    assert w.reservations and w.nodes * w.gpus_per_node >= max(p.count for p in w.reservations)
    for plan in w.reservations:
        assert len(plan.runs) == plan.count
        for runs in plan.runs:
            assert all(0 <= r.start_s < r.end_s <= plan.hours * 3600 for r in runs), plan.kind
    for hour in range(days * 24):
        held = sum(p.count for p in w.reservations if p.start_h <= hour < p.start_h + p.hours)
        assert held <= w.nodes * w.gpus_per_node
    assert all(f.start_s < f.end_s <= days * DAY + DAY for f in w.failures)
