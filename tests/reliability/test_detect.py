"""The taxonomy, the statistics and the detectors over a small fleet with one lemon, a
GPU drowning in application XIDs (which must count for nothing) and a fixed clock."""

from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.ingest.health import event_health_state
from gpuquota.ingest.taxonomy import (
    APPLICATION_XIDS,
    DEGRADED_XIDS,
    FAILED_XIDS,
    Action,
    RemapState,
    Severity,
    classify,
    remap_verdict,
)
from gpuquota.reliability.drift import drift
from gpuquota.reliability.lemons import lemons
from gpuquota.reliability.selectors import reliability_figures
from gpuquota.reliability.stats import poisson_ci, poisson_sf, rate_excess_p
from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu
from tests.reliability.factories import event_add, fleet_build

AS_OF = datetime(2026, 6, 1, tzinfo=UTC)


def test_taxonomy_keeps_the_specs_health_table_and_application_xids_out():
    assert FAILED_XIDS == {48, 64, 79, 95, 119, 120}
    assert DEGRADED_XIDS == {63, 74, 92, 94}
    assert {13, 31, 43, 45} <= APPLICATION_XIDS
    for xid in APPLICATION_XIDS:
        entry = classify(type="xid", xid=xid)
        assert not entry.is_hardware and entry.health is None
        assert event_health_state(type="xid", xid=xid) is None
    assert classify(type="xid", xid=79).action == Action.REBOOT
    assert classify(type="xid", xid=48).severity == Severity.CRITICAL
    assert classify(type="xid", xid=9999).severity == Severity.INFO
    assert classify(type="gpu_lost").is_hardware_failure
    assert remap_verdict(RemapState(failure=True)) == (Action.REPLACE, 0.0)
    assert remap_verdict(RemapState(uncorrectable=2, pending=True)) == (Action.RESET_GPU, 0.75)


def test_exact_poisson_figures():
    low, high = poisson_ci(10)  # Garwood's published interval for 10 events
    assert round(low, 3) == 4.795 and round(high, 3) == 18.390
    assert poisson_ci(0)[0] == 0 and round(poisson_ci(0)[1], 3) == 3.689
    assert poisson_sf(0, 1.0) == 1.0 and 1.5e-5 < poisson_sf(5, 0.3) < 1.6e-5
    assert rate_excess_p(k_recent=30, t_recent=14, k_base=60, t_base=90) < 1e-5
    assert rate_excess_p(k_recent=9, t_recent=14, k_base=60, t_base=90) > 0.1


@pytest.fixture
def fleet(db):
    return fleet_build(as_of=AS_OF)


def test_figures_count_hardware_failures_only(fleet):
    (klass,) = reliability_figures(as_of=AS_OF, group="class", days=90)
    assert klass["failures"] == 7 and klass["hardware_warnings"] == 1
    assert klass["gpus"] == 20 and klass["gpu_days"] == 1800
    assert klass["failures_per_1000_gpu_days"] == round(7000 / 1800, 3)
    assert klass["ci95_low"] < klass["failures_per_1000_gpu_days"] < klass["ci95_high"]
    assert klass["by_action"] == {"reboot": 6, "reset_gpu": 1}
    noisy = next(f for f in reliability_figures(as_of=AS_OF, group="gpu", days=90)
                 if f["key"] == fleet["noisy"].uuid)
    assert noisy["failures"] == 0 and noisy["hardware_warnings"] == 0


def test_the_lemon_is_flagged_with_evidence_and_replays(fleet):
    (flag,) = lemons(as_of=AS_OF)
    assert flag.key == fleet["lemon"].uuid and (flag.failures, flag.warnings) == (5, 1)
    # its third incident, the row remapped 40 days ago, is the first flagged
    assert flag.first_flagged == AS_OF - timedelta(days=40)
    assert flag.evidence[0].startswith("5 failures and 1 hardware warnings in 180 days")
    assert "xid 79 x5" in flag.evidence[1]
    assert any("row remapped" in line for line in flag.evidence)
    # replayed before its first flag, nothing is flagged
    assert lemons(as_of=flag.first_flagged - timedelta(seconds=1)) == []
    assert lemons(as_of=flag.first_flagged)[0].first_flagged == flag.first_flagged
    (node,) = lemons(as_of=AS_OF, kind="node")
    assert node.key.endswith(fleet["lemon"].node.hostname)


def test_hardware_warnings_count_with_failures_and_application_xids_do_not(fleet):
    """Two failures alone are not a lemon (fewer than three); with three hardware warnings
    (XID 94, 92, 74: degraded, not failed) the GPU is flagged; the noisy GPU's 300
    application XIDs still count for nothing."""
    suspect = fleet["gpus"][17]
    for days, xid in ((90, 79), (25, 95)):
        event_add(suspect, AS_OF - timedelta(days=days), xid)
    assert suspect.uuid not in {f.key for f in lemons(as_of=AS_OF)}
    for days, xid in ((80, 94), (60, 92), (10, 74)):
        event_add(suspect, AS_OF - timedelta(days=days), xid)
    flag = next(f for f in lemons(as_of=AS_OF) if f.key == suspect.uuid)
    assert (flag.failures, flag.warnings) == (2, 3)
    assert "3 hardware warnings (xid 94 x1, xid 92 x1, xid 74 x1)" in flag.evidence
    assert flag.first_flagged == AS_OF - timedelta(days=60)  # its third incident
    assert fleet["noisy"].uuid not in {f.key for f in lemons(as_of=AS_OF)}


def test_a_fault_hitting_every_gpu_of_a_node_at_once_counts_once(fleet):
    """Three NVLink faults (XID 74) each seen on all four GPUs of node n02 within a minute
    are three incidents of the node, not twelve (its GPUs, three each, are no lemons).
    Against the class's healthy nodes (two incidents in all: the lemon's node is left out
    of the base rate) three are enough to flag it; twelve would have been p < 1e-10."""
    node_gpus = fleet["gpus"][8:12]
    for days in (50, 30, 10):
        for n, gpu in enumerate(node_gpus):
            event_add(gpu, AS_OF - timedelta(days=days) + timedelta(seconds=10 * n), 74)
    node = next(f for f in lemons(as_of=AS_OF, kind="node") if f.key.endswith("/n02"))
    assert (node.failures, node.warnings) == (0, 3)
    assert node.expected == pytest.approx(2 / 3, abs=0.001) and node.p_value > 0.01
    assert not {g.uuid for g in node_gpus} & {f.key for f in lemons(as_of=AS_OF)}


def test_drift_flags_a_node_against_its_peers_not_application_noise(fleet):
    for days in (1, 2, 4, 6):
        event_add(fleet["lemon"], AS_OF - timedelta(days=days, hours=1), 95)
    found = drift(as_of=AS_OF)
    assert [(d.kind, d.key) for d in found] == [
        ("node", f"{fleet['lemon'].node.cluster.slug}/{fleet['lemon'].node.hostname}")]


def test_jobs_a_failure_ended_count_against_the_gpu(fleet):
    lemon, failure = fleet["lemon"], fleet["failures"][-1]
    cluster = lemon.node.cluster

    def job(job_id, state, ended):
        started = ended - timedelta(hours=2)
        SlurmJob.objects.create(cluster=cluster, job_id=job_id, submitted_at=started,
                                started_at=started, ended_at=ended, state=state, gpus=4)
        SlurmJobGpu.objects.create(cluster=cluster, job_id=job_id, node=lemon.node.hostname,
                                   gpu_index=lemon.index, gpu=lemon, first_seen_at=started,
                                   last_seen_at=ended)

    job("1", "FAILED", failure + timedelta(minutes=2))  # the xid 79 ended it
    job("2", "COMPLETED", failure + timedelta(minutes=1))
    job("3", "FAILED", failure - timedelta(days=1))  # the program's own failure
    job("4", "NODE_FAIL", failure - timedelta(days=2))
    by_key = {f["key"]: f for f in reliability_figures(as_of=AS_OF, group="gpu", days=90)}
    assert by_key[lemon.uuid]["jobs_killed"] == 2
    assert by_key[lemon.uuid]["gpu_hours_lost"] == 16.0
    (flag,) = lemons(as_of=AS_OF)
    assert "2 jobs failed on it (16.0 GPU-hours lost)" in flag.evidence
