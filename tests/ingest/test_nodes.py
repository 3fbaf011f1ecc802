"""Enrolment, tokens, and GPUs that belong to one live node at a time."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from gpuquota.core.errors import Conflict
from gpuquota.core.models import AuditEntry
from gpuquota.core.tokens import token_hash
from gpuquota.ingest.models import AgentBatch, NodeToken, Sample
from gpuquota.ingest.selectors import node_for_token
from gpuquota.ingest.services import node_enrol, node_token_revoke, node_token_rotate
from gpuquota.inventory.models import Gpu, GpuNodeInterval, Node
from tests.factories import ClusterFactory
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    gpu_entry,
    new_gpu_uuid,
    recent_minute,
    sample,
)

pytestmark = pytest.mark.django_db


def test_enrol_stores_only_the_hash_and_audits():
    issued = enrolled("gpu-node-01")
    token = NodeToken.objects.get(node=issued.node)
    assert issued.key.startswith("gqn_") and token.key_hash == token_hash(issued.key)
    assert issued.key not in str(list(NodeToken.objects.values()))
    assert token.prefix == issued.key[:10]
    assert AuditEntry.objects.filter(action="node.enrol", object_id=str(issued.node.pk)).exists()
    assert node_for_token(key=issued.key) == issued.node


def test_enrolling_a_node_twice_is_a_conflict():
    cluster = ClusterFactory()
    node_enrol(cluster=cluster, hostname="n1", actor=None)
    with pytest.raises(Conflict):
        node_enrol(cluster=cluster, hostname="n1", actor=None)


def test_rotate_revokes_the_old_token_and_audits():
    issued = enrolled()
    rotated = node_token_rotate(node=issued.node, actor=None)
    assert node_for_token(key=issued.key) is None
    assert node_for_token(key=rotated.key) == issued.node
    entry = AuditEntry.objects.get(action="node.token_rotate")
    assert entry.changes["revoked_prefixes"] == [issued.prefix]


def test_revoke_revokes_every_live_token():
    issued = enrolled()
    assert node_token_revoke(node=issued.node, actor=None, reason="stolen") == 1
    assert node_for_token(key=issued.key) is None
    assert AuditEntry.objects.get(action="node.token_revoke").reason == "stolen"


def test_node_token_command_creates_cluster_and_node_and_prints_the_token_last():
    out, err = StringIO(), StringIO()
    call_command("node_token", "--cluster", "Hopper", "--hostname", "gpu-01", stdout=out,
                 stderr=err)
    key = out.getvalue().strip().splitlines()[-1]
    node = Node.objects.get(hostname="gpu-01", cluster__slug="hopper")
    assert node_for_token(key=key) == node
    out2 = StringIO()
    call_command("node_token", "--cluster", "hopper", "--hostname", "gpu-01", stdout=out2,
                 stderr=StringIO())
    key2 = out2.getvalue().strip().splitlines()[-1]
    assert node_for_token(key=key) is None and node_for_token(key=key2) == node
    assert Node.objects.count() == 1


def test_batch_updates_node_and_gpu_last_seen_and_skew():
    issued = enrolled()
    agent = Agent(issued.key, Client())
    gpu = new_gpu_uuid()
    body = batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute())])
    body["sent_at"] = (timezone.now() - timedelta(seconds=45)).strftime("%Y-%m-%dT%H:%M:%SZ")
    agent.post(body)
    node = Node.objects.get(pk=issued.node.pk)
    assert node.last_seen_at is not None and node.agent_version == "1.0.0"
    assert node.driver_version == "580.65.06" and node.boot_id == body["node"]["boot_id"]
    assert 44 <= node.clock_skew_s <= 50
    batch_row = node.batches.get()
    assert batch_row.clock_skew_s == node.clock_skew_s
    registered = Gpu.objects.get(uuid=gpu)
    assert registered.node == node and registered.last_seen_at is not None
    assert registered.memory_total_bytes == 150754820096 and registered.power_limit_w == 700
    assert registered.gpu_class.name == "NVIDIA H200"


def test_listed_gpu_uses_the_model_name_mapping():
    from gpuquota.inventory.models import GpuClass, GpuModelMapping

    h200 = GpuClass.objects.create(name="H200-141GB")
    GpuModelMapping.objects.create(model_name="NVIDIA H200", gpu_class=h200)
    agent = Agent(enrolled().key, Client())
    gpu = new_gpu_uuid()
    agent.post(batch(gpus=[gpu_entry(gpu)]))
    assert Gpu.objects.get(uuid=gpu).gpu_class == h200


def two_nodes():
    cluster = ClusterFactory()
    a, b = enrolled("node-a", cluster), enrolled("node-b", cluster)
    return Agent(a.key, Client()), Agent(b.key, Client()), a.node, b.node


def test_a_token_never_writes_another_live_nodes_gpu():
    agent_a, agent_b, node_a, _ = two_nodes()
    gpu = new_gpu_uuid()
    agent_a.post(batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(3))]))
    body = agent_b.post(batch(gpus=[gpu_entry(gpu)],
                              samples=[sample(gpu, recent_minute(2))])).json()
    assert body["samples"]["stored"] == 0
    assert body["rejected"] == [
        {"path": "gpus[0].uuid", "why": "GPU belongs to another live node"},
        {"path": "samples[0].gpu_uuid", "why": "GPU belongs to another live node"}]
    assert Gpu.objects.get(uuid=gpu).node == node_a
    assert Sample.objects.count() == 1
    assert AuditEntry.objects.filter(action="gpu.contested").count() == 1
    # Unlisted, it is still not this node's GPU.
    body = agent_b.post(batch(samples=[sample(gpu, recent_minute(1))])).json()
    assert body["samples"]["stored"] == 0
    assert AuditEntry.objects.filter(action="gpu.contested").count() == 1  # at most hourly


def test_a_gpu_silent_for_15_minutes_moves_to_the_reporting_node():
    agent_a, agent_b, node_a, node_b = two_nodes()
    parent, mig = new_gpu_uuid(), new_gpu_uuid("MIG")
    listed = [gpu_entry(parent), gpu_entry(mig, index=1, parent=parent)]
    agent_a.post(batch(gpus=listed))
    an_hour_ago = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    GpuNodeInterval.objects.update(valid_from=an_hour_ago)  # registered a while ago
    Gpu.objects.filter(uuid=parent).update(
        last_seen_at=timezone.now() - timedelta(minutes=14))
    assert agent_b.post(batch(gpus=listed)).json()["rejected"] != []
    Gpu.objects.filter(uuid__in=[parent, mig]).update(
        last_seen_at=timezone.now() - timedelta(minutes=15, seconds=5))
    body = agent_b.post(batch(gpus=listed, samples=[sample(mig, recent_minute())])).json()
    assert body["rejected"] == [] and body["samples"]["stored"] == 1
    assert Gpu.objects.get(uuid=parent).node == node_b
    assert Gpu.objects.get(uuid=mig).node == node_b
    intervals = GpuNodeInterval.objects.filter(gpu__uuid=parent).order_by("valid_from")
    assert [(i.node, i.valid_until is None) for i in intervals] == [(node_a, False), (node_b, True)]
    assert AuditEntry.objects.filter(action="gpu.move").exists()
    # Now node A is the newcomer.
    assert agent_a.post(batch(samples=[sample(parent, recent_minute())])).json()[
        "samples"]["stored"] == 0


def test_sent_at_is_stored_as_a_whole_second():
    agent = Agent(enrolled().key, Client())
    body = batch()
    body["sent_at"] = "2026-11-29T16:45:00.900Z"
    agent.post(body)
    assert AgentBatch.objects.get().sent_at == datetime(2026, 11, 29, 16, 45, tzinfo=UTC)


def test_a_gpu_reported_14_minutes_ago_is_not_moved(time_machine):
    start = timezone.now().replace(microsecond=0)
    time_machine.move_to(start, tick=False)
    agent_a, agent_b, node_a, _ = two_nodes()
    gpu = new_gpu_uuid()
    agent_a.post(batch(gpus=[gpu_entry(gpu)]))
    time_machine.move_to(start + timedelta(seconds=20), tick=False)
    agent_a.post(batch(gpus=[gpu_entry(gpu)]))  # node A still reports it
    time_machine.move_to(start + timedelta(minutes=15, seconds=10), tick=False)
    body = agent_b.post(batch(gpus=[gpu_entry(gpu)])).json()
    assert [r["path"] for r in body["rejected"]] == ["gpus[0].uuid"]
    assert Gpu.objects.get(uuid=gpu).node == node_a


def test_a_new_mig_device_of_another_live_nodes_gpu_is_rejected():
    agent_a, agent_b, node_a, _ = two_nodes()
    parent, mig = new_gpu_uuid(), new_gpu_uuid("MIG")
    agent_a.post(batch(gpus=[gpu_entry(parent)]))
    body = agent_b.post(batch(gpus=[gpu_entry(parent), gpu_entry(mig, index=1, parent=parent)],
                              samples=[sample(mig, recent_minute())])).json()
    assert body["samples"]["stored"] == 0
    assert [r["path"] for r in body["rejected"]] == ["gpus[0].uuid", "gpus[1].uuid",
                                                     "samples[0].gpu_uuid"]
    assert not Gpu.objects.filter(uuid=mig).exists()
    assert Gpu.objects.get(uuid=parent).node == node_a


def test_a_moved_gpu_is_judged_with_the_limits_its_new_node_lists():
    agent_a, agent_b, _, node_b = two_nodes()
    gpu = new_gpu_uuid()
    agent_a.post(batch(gpus=[gpu_entry(gpu, power_limit_w=300)]))
    GpuNodeInterval.objects.update(valid_from=timezone.now().replace(microsecond=0)
                                   - timedelta(hours=1))  # registered a while ago
    Gpu.objects.filter(uuid=gpu).update(last_seen_at=timezone.now() - timedelta(minutes=16))
    body = agent_b.post(batch(gpus=[gpu_entry(gpu, power_limit_w=700)],
                              samples=[sample(gpu, recent_minute(), power_w_avg=1500.0)])).json()
    assert body["rejected"] == [] and body["nulled"] == []
    moved = Gpu.objects.get(uuid=gpu)
    assert moved.node == node_b and moved.power_limit_w == 700
