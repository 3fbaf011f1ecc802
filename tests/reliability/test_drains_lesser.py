"""A lesser event (a hardware warning whose fix is a reset, a reboot or a replacement)
drains its node after the running jobs end: Slurm's `State=DRAIN` lets them finish (the
node shows MIXED+DRAIN, then IDLE+DRAIN), against a stand-in `scontrol` that keeps the
node's base state; a warning needing no fix never drains; a critical failure on a node
draining for a lesser event escalates that drain; a lesser drain returns by itself once
its degraded interval closed."""

import stat
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.ingest.models import GpuEvent
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reliability.drains import drains_apply, drains_auto_release
from gpuquota.reliability.models import Drain
from gpuquota.schedulers.models import BackendConfig
from gpuquota.schedulers.runner import Runner
from gpuquota.schedulers.slurm.drain import node_state
from tests.factories import ClusterFactory, NodeFactory, make_gpu

pytestmark = [pytest.mark.django_db]
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
MIN = timedelta(minutes=1)
# The node runs a job (MIXED); DRAIN adds the flag and keeps the job running.
SCONTROL = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
base=$(cat "$dir/base" 2>/dev/null || echo MIXED)
if [ "$1" = update ]; then
  for a in "$@"; do case "$a" in
    State=DRAIN) echo "$base+DRAIN" > "$dir/flags";;
    State=RESUME) echo "$base" > "$dir/flags"; : > "$dir/reason";;
    Reason=*) echo "${a#Reason=}" > "$dir/reason";;
  esac; done
  exit 0
fi
flags=$(cat "$dir/flags" 2>/dev/null || echo "$base")
printf 'NodeName=%s State=%s ' "$4" "$flags"
echo "Reason=$(cat "$dir/reason" 2>/dev/null) [slurm@2026-06-01T12:00:00] Comment=(null)"
"""


@pytest.fixture
def site(db, tmp_path):
    path = tmp_path / "scontrol"
    path.write_text(SCONTROL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    cluster = ClusterFactory(slug="slurm-b")
    BackendConfig.objects.create(cluster=cluster, commands_dir=str(tmp_path))
    node = NodeFactory(cluster=cluster, hostname="gpu-11")
    return {"node": node, "gpu": make_gpu(node=node, at=NOW - timedelta(days=30)),
            "dir": tmp_path, "runner": Runner(commands_dir=str(tmp_path))}


def _event(site, xid, at, type_="xid"):
    return GpuEvent.objects.create(event_id=uuid.uuid4(), node=site["node"], gpu=site["gpu"],
                                   ts=at, type=type_, xid=xid, received_at=at)


def test_a_lesser_event_drains_after_the_jobs_and_a_critical_one_escalates(site):
    _event(site, 92, NOW - 3 * MIN)  # high single-bit ECC rate: no fix named, no drain
    _event(site, 94, NOW - 3 * MIN)  # contained ECC error: restart the application
    assert drains_apply(since=NOW - 5 * MIN, now=NOW - 2 * MIN) == []
    _event(site, 63, NOW - 2 * MIN)  # row remapping recorded: a reset applies it
    (drain,) = drains_apply(since=NOW - 5 * MIN, now=NOW - MIN)
    assert (drain.after_jobs, drain.needs, drain.reason) == (True, "reset_gpu", "xid 63")
    assert node_state(site["runner"], "gpu-11") == (
        {"MIXED", "DRAIN"}, "[gpuquota] xid 63, after running jobs")  # the job runs on
    _event(site, 79, NOW)
    (escalated,) = drains_apply(since=NOW - 5 * MIN, now=NOW)
    assert escalated.pk == drain.pk and Drain.objects.count() == 1
    assert (escalated.after_jobs, escalated.needs, escalated.reason) == (False, "reboot",
                                                                         "xid 79")
    assert node_state(site["runner"], "gpu-11")[1] == "[gpuquota] xid 79"
    assert drains_apply(since=NOW - 5 * MIN, now=NOW) == []  # idempotent


def test_a_lesser_drain_returns_once_its_degraded_interval_closed(site):
    event = _event(site, 74, NOW - 2 * MIN)  # NVLink error: reset
    (drain,) = drains_apply(since=NOW - 5 * MIN, now=NOW)
    interval = GpuHealthInterval.objects.create(gpu=site["gpu"], state="degraded",
                                                valid_from=event.ts, reason="xid 74")
    assert drains_auto_release(now=NOW + MIN) == []
    interval.valid_until, interval.closed_reason = NOW + 5 * MIN, "new boot and a good sample"
    interval.save()
    (released,) = drains_auto_release(now=NOW + 10 * MIN)
    assert released.pk == drain.pk and released.release_fix == "new boot and a good sample"
    assert node_state(site["runner"], "gpu-11")[0] == {"MIXED"}
