"""Drains by policy through the Slurm backend's runner, against a stand-in `scontrol` (a
script keeping the node's state in files, so the runner really runs a command and reads
it back): a critical XID drains the node with gpuquota's reason, an application XID does
not, the node returns only after the fix the failure needs, a site's own drain is never
resumed."""

import os
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from gpuquota.celery import collect_beat_schedule
from gpuquota.core.errors import DomainError
from gpuquota.ingest.models import GpuEvent
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reliability.drains import (
    drain_release,
    drains_apply,
    drains_auto_release,
    drains_observe,
)
from gpuquota.reliability.models import Drain
from gpuquota.reliability.tasks import drains_task
from gpuquota.schedulers.models import BackendConfig
from gpuquota.schedulers.runner import Runner
from gpuquota.schedulers.slurm.drain import drain_progress, node_drain, node_resume, node_state
from tests.factories import AdminFactory, ClusterFactory, NodeFactory, make_gpu
from tests.reliability.factories import scontrol_standin

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.fixture
def scontrol(tmp_path):
    return scontrol_standin(tmp_path)


@pytest.fixture
def site(db, scontrol):
    cluster = ClusterFactory(slug="slurm-a")
    BackendConfig.objects.create(cluster=cluster, commands_dir=str(scontrol))
    node = NodeFactory(cluster=cluster, hostname="gpu-07")
    return {"node": node, "gpu": make_gpu(node=node, at=NOW - timedelta(days=30)),
            "dir": scontrol}


def _event(site, xid, at=NOW - timedelta(minutes=1), type_="xid"):
    return GpuEvent.objects.create(event_id=uuid.uuid4(), node=site["node"], gpu=site["gpu"],
                                   ts=at, type=type_, xid=xid, received_at=at)


def test_runner_drains_and_reads_back(scontrol):
    runner = Runner(commands_dir=str(scontrol))
    node_drain(runner, "gpu-07", "xid 79")
    assert node_state(runner, "gpu-07") == ({"IDLE", "DRAIN"}, "[gpuquota] xid 79")
    assert "update NodeName=gpu-07 State=DRAIN Reason=[gpuquota] xid 79" in (
        scontrol / "calls").read_text()
    assert node_resume(runner, "gpu-07") is True
    assert node_state(runner, "gpu-07")[0] == {"IDLE"}


def test_a_sites_own_drain_is_never_resumed(scontrol):
    (scontrol / "flags").write_text("IDLE+DRAIN\n")
    (scontrol / "reason").write_text("bad fan, ticket 4411\n")
    assert node_resume(Runner(commands_dir=str(scontrol)), "gpu-07") is False
    assert "RESUME" not in (scontrol / "calls").read_text()


def test_critical_xid_drains_once_application_xid_never(site):
    _event(site, 13)
    _event(site, 43)
    assert drains_apply(since=NOW - timedelta(minutes=5), now=NOW) == []
    _event(site, 79)
    _event(site, 48, at=NOW - timedelta(seconds=30))  # same node: one drain
    (drain,) = drains_apply(since=NOW - timedelta(minutes=5), now=NOW)
    assert (drain.state, drain.reason, drain.needs) == ("drained", "xid 79", "reboot")
    assert "Reason=[gpuquota] xid 79" in (site["dir"] / "calls").read_text()
    assert drains_apply(since=NOW - timedelta(minutes=5), now=NOW) == []  # idempotent


def test_return_only_after_the_fix_named(site):
    _event(site, 64)  # row remapping failure: NVIDIA's RMA condition
    (drain,) = drains_apply(since=NOW - timedelta(minutes=5), now=NOW)
    assert drain.needs == "replace"
    admin = AdminFactory()
    with pytest.raises(DomainError) as refused:
        drain_release(drain=drain, by=admin, fix="reset", at=NOW)
    assert refused.value.field == "fix"
    drain_release(drain=drain, by=admin, fix="replaced", at=NOW)
    assert Drain.objects.get().released_by == admin
    assert drains_apply(since=NOW - timedelta(minutes=5), now=NOW) == []  # not again
    assert "State=RESUME" in (site["dir"] / "calls").read_text()


def test_a_reboot_with_a_good_sample_returns_it_automatically(site):
    event = _event(site, 79)
    (drain,) = drains_apply(since=NOW - timedelta(minutes=5), now=NOW)
    interval = GpuHealthInterval.objects.create(
        gpu=site["gpu"], state="failed", valid_from=event.ts, reason="xid 79", boot_id="b1")
    assert drains_auto_release(now=NOW + timedelta(minutes=5)) == []  # still failed
    interval.valid_until = NOW + timedelta(minutes=20)
    interval.closed_reason = "new boot b2 and a good sample"
    interval.save()
    (released,) = drains_auto_release(now=NOW + timedelta(minutes=30))
    assert released.release_fix == "new boot b2 and a good sample"
    assert os.path.exists(site["dir"] / "calls")
    drain.refresh_from_db()
    assert drain.released_at == NOW + timedelta(minutes=30)


def test_the_page_lists_the_drain_and_an_admin_returns_it(site, client):
    _event(site, 79)
    (drain,) = drains_apply(since=NOW - timedelta(minutes=5), now=NOW)
    client.force_login(AdminFactory())
    page = client.get("/fleet/reliability/").content.decode()
    assert "gpu-07" in page and "Return to service" in page and "xid 79" in page
    url = f"/fleet/reliability/drains/{drain.pk}/return/"
    refused = client.post(url, {"fix": "reset"}, follow=True).content.decode()
    assert "needs reboot" in refused and Drain.objects.get().released_at is None
    client.post(url, {"fix": "reboot"})
    assert Drain.objects.get().release_fix == "reboot"
    assert "State=RESUME" in (site["dir"] / "calls").read_text()


def test_the_task_drains_what_just_arrived(site):
    assert collect_beat_schedule()["reliability-drains"]["task"] == "reliability.drains"
    _event(site, 119)
    with time_machine.travel(NOW + timedelta(minutes=1), tick=False):
        assert drains_task() == {"drained": 1, "progress_changed": 1, "released": 0,
                                 "moved": 0, "kept": 0, "rma_replaced": 0}
        assert drains_task() == {"drained": 0, "progress_changed": 0, "released": 0,
                                 "moved": 0, "kept": 0, "rma_replaced": 0}


def test_slurm_drain_progress_read_from_the_node_state():
    assert drain_progress({"MIXED", "DRAIN"}) == "draining"
    assert drain_progress({"ALLOCATED", "DRAIN"}) == "draining"
    assert drain_progress({"IDLE", "DRAIN"}) == "drained"
    assert drain_progress({"DRAINING"}) == "draining"  # as sinfo spells it
    assert drain_progress({"DRAINED"}) == "drained"
    assert drain_progress({"MIXED"}) == ""


def test_draining_then_drained_as_slurm_shows_it(site, client):
    _event(site, 63)  # a lesser event: the node drains after its running jobs
    (drain,) = drains_apply(since=NOW - timedelta(minutes=5), now=NOW)
    (site["dir"] / "flags").write_text("MIXED+DRAIN\n")  # a job still runs there
    (seen,) = drains_observe(now=NOW + timedelta(minutes=1))
    assert (seen.progress, seen.progress_at) == ("draining", NOW + timedelta(minutes=1))
    assert drains_observe(now=NOW + timedelta(minutes=2)) == []  # unchanged
    client.force_login(AdminFactory())
    page = client.get("/fleet/reliability/").content.decode()
    assert 'data-progress="draining"' in page and "jobs still running" in page
    (site["dir"] / "flags").write_text("IDLE+DRAIN\n")  # the job ended
    (seen,) = drains_observe(now=NOW + timedelta(minutes=3))
    assert seen.progress == "drained"
    assert 'data-progress="drained"' in client.get("/fleet/reliability/").content.decode()
