"""A drain pass reads how far a cluster's drains got in one pass: its pods, nodes, gpuquota's
drain rules and ResourceClaims each listed once, whatever the number of GPUs draining (the
fake API server records every request)."""

import uuid
from datetime import timedelta

import pytest

from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drains import drains_apply, drains_observe
from gpuquota.reliability.models import Drain
from tests.kubernetes.conftest import NOW, claim_on, dra_server, gpu_slice

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


def _fail(gpu, xid: int = 63) -> None:
    """A lesser event (NoSchedule: the GPU's pods run on, its drain is draining)."""
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=NOW, type="xid",
                            xid=xid, received_at=NOW)
    drains_apply(since=NOW - timedelta(minutes=1), now=NOW)


def _pod_with_claim(server, gpu, name: str) -> None:
    server.put({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "speech"},
                "spec": {"nodeName": gpu.node.hostname,
                         "containers": [{"name": "main", "image": "train:1"}],
                         "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]},
                "status": {"phase": "Running"}})
    claim_on(server, gpu, name, pod=name)


def _observed(server) -> tuple[list[str], dict]:
    seen = len(server.requests)
    drains_observe(now=NOW + timedelta(minutes=1))
    reads = sorted(r.path for r in server.requests[seen:])
    return reads, {(d.scope, d.node.hostname, d.gpu.index): d.progress
                   for d in Drain.objects.select_related("node", "gpu")}


def test_the_progress_pass_lists_each_kind_once_whatever_the_gpus_draining(kube):
    a, b = kube.gpus["gpu-a"], kube.gpus["gpu-b"]
    # gpu-a's GPUs are published by the DRA driver (drained alone); gpu-b's are not
    # (its node is cordoned)
    server = dra_server(slices=[gpu_slice("gpu-a", a)])
    try:
        for name in ("gpu-a", "gpu-b"):
            server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                        "spec": {}})
        kube.configure(server)
        _pod_with_claim(server, a[1], "busy")
        _fail(a[0])
        one, progress_one = _observed(server)
        for gpu in (a[1], a[2], a[3], b[0]):
            _fail(gpu)
        server.put({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "on-b", "namespace": "speech"},
                    "spec": {"nodeName": "gpu-b",
                             "containers": [{"name": "main", "image": "train:1"}]},
                    "status": {"phase": "Running"}})
        many, progress_many = _observed(server)
    finally:
        server.stop()
    assert progress_one == {("gpu", "gpu-a", 0): "drained"}
    assert progress_many == {("gpu", "gpu-a", 0): "drained", ("gpu", "gpu-a", 1): "draining",
                             ("gpu", "gpu-a", 2): "drained", ("gpu", "gpu-a", 3): "drained",
                             ("node", "gpu-b", 0): "draining"}
    lists = {"/api/v1/pods", "/apis/resource.k8s.io/v1/devicetaintrules",
             "/apis/resource.k8s.io/v1/resourceclaims"}
    assert lists <= set(one) and {p for p in one if one.count(p) > 1} == set()
    # four GPUs and a node draining: the same lists once each, and the nodes' once
    assert sorted(set(many) - set(one)) == ["/api/v1/nodes"]
    assert {p for p in many if many.count(p) > 1} == set()
    assert len(many) == len(one) + 1
