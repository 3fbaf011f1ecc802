"""A critical failure on a Kubernetes node cordons and taints it through the backend,
against the fake API server limited by the shipped ClusterRole; the return removes only
what gpuquota set (a site's own cordon stays)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.ingest.models import GpuEvent
from gpuquota.inventory.models import Cluster
from gpuquota.reliability.drains import drain_release, drains_apply
from gpuquota.schedulers.services import backend_config_update
from tests.factories import AdminFactory, ClusterFactory, NodeFactory, make_gpu
from tests.kubernetes.conftest import TOKEN, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
TAINT = {"key": "gpuquota.io/gpu-failure", "value": "xid-79", "effect": "NoSchedule"}


@pytest.fixture
def server():
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(),
                           rbac_roles=shipped_roles()).start()
    for name in ("gpu-a", "gpu-b"):
        server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                    "spec": {"taints": [{"key": "site/dedicated", "value": "ml",
                                         "effect": "NoSchedule"}]}})
    yield server
    server.stop()


def _failure(node, gpu, xid):
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=node, gpu=gpu, ts=NOW, type="xid",
                            xid=xid, received_at=NOW)


def test_cordon_taint_and_return(db, server):
    cluster = ClusterFactory(slug="kube", scheduler=Cluster.Scheduler.KUBERNETES)
    admin = AdminFactory()
    backend_config_update(cluster=cluster, actor=admin, token=server.token, api_url=server.url)
    gpus = {h: make_gpu(node=NodeFactory(cluster=cluster, hostname=h)) for h in ("gpu-a",
                                                                               "gpu-b")}
    server.put({**server.get("Node", "gpu-b"), "spec": {**server.get("Node", "gpu-b")["spec"],
                                                       "unschedulable": True}})
    for gpu in gpus.values():
        _failure(gpu.node, gpu, 79)
    drains = drains_apply(since=NOW - timedelta(minutes=1), now=NOW)
    assert [d.state for d in drains] == ["drained", "drained"]
    node_a = server.get("Node", "gpu-a")
    assert node_a["spec"]["unschedulable"] is True and TAINT in node_a["spec"]["taints"]
    assert {"key": "site/dedicated", "value": "ml", "effect": "NoSchedule"} in (
        node_a["spec"]["taints"])
    for drain in drains:
        drain_release(drain=drain, by=admin, fix="reboot", at=NOW)
    node_a, node_b = server.get("Node", "gpu-a"), server.get("Node", "gpu-b")
    assert not node_a["spec"].get("unschedulable")
    assert TAINT not in node_a["spec"]["taints"] and TAINT not in node_b["spec"]["taints"]
    assert node_b["spec"]["unschedulable"] is True  # the site had cordoned it: it stays
