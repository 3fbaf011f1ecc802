"""DRA's older API versions (docs/kubernetes.md#dra-api-versions): a cluster serving
ResourceSlices in resource.k8s.io/v1beta1 only (Kubernetes 1.32, or 1.33 without v1beta2),
v1beta2 (1.33) or v1 (1.34+) has its slices read in that version and shape (v1beta1 nests a
device's attributes under `basic`), each slice valid for its release's schema; with
DeviceTaintRules served (v1alpha3 from 1.33) a failed GPU is drained alone. The capability
probe asks the API server for one slice of the driver (`limit=1`, `fieldSelector`), not for
every slice of the cluster."""

import copy
import uuid
from datetime import timedelta
from urllib.parse import parse_qs

import kubernetes_validate
import pytest

from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drains import drains_apply
from gpuquota.schedulers.models import Capabilities
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, TOKEN, gpu_slice, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer, dra

pytestmark = [pytest.mark.kubernetes]
RULE = "gq-drain-gpu-a-gpu2"


def _server(version: str, runtime_config: set, slices: list[dict]) -> FakeApiServer:
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                           version=version, runtime_config=runtime_config).start()
    release = version.lstrip("v").rsplit(".", 1)[0] + ".0"
    for obj in slices:
        kubernetes_validate.validate(obj, release, strict=True)
        server.put(obj)
    server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a"}, "spec": {}})
    return server


def _in(version: str, resource_slice: dict) -> dict:
    """The slice as its driver writes it in `version` (v1beta1: devices' fields in `basic`)."""
    return {**dra.slice_as(copy.deepcopy(resource_slice), version),
            "apiVersion": f"resource.k8s.io/{version}"}


def _other_driver(node: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-nic"},
            "spec": {"driver": "aa.nic.example.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "nic-0"}]}}


def _fail(gpu) -> None:
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=NOW, type="xid",
                            xid=79, received_at=NOW)
    drains_apply(since=NOW - timedelta(minutes=1), now=NOW)


@pytest.mark.parametrize(("version", "runtime_config", "slices", "taints"), [
    ("v1.33.2", {"resource.k8s.io/v1alpha3", "resource.k8s.io/v1beta2=false"}, "v1beta1",
     "v1alpha3"),
    ("v1.33.2", {"resource.k8s.io/v1alpha3"}, "v1beta2", "v1alpha3"),
    ("v1.34.1", {"resource.k8s.io/v1alpha3"}, "v1", "v1alpha3"),
])
@pytest.mark.django_db
def test_each_served_version_of_resourceslices_is_read_and_a_gpu_drained_alone(
        kube, version, runtime_config, slices, taints):
    gpus = kube.gpus["gpu-a"]
    server = _server(version, runtime_config, [
        _in(slices, _other_driver(n)) for n in ("gpu-a", "gpu-b", "gpu-c")
    ] + [_in(slices, gpu_slice("gpu-a", gpus))])
    try:
        kube.configure(server)
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        _fail(gpus[2])
        rule = server.get("DeviceTaintRule", RULE)
        reads = [(r.path, parse_qs(r.query)) for r in server.requests
                 if r.method == "GET" and r.path.endswith("/resourceslices")]
    finally:
        server.stop()
    assert summary.outcome == "ok", summary.error
    facts = Capabilities.objects.get(cluster=kube.cluster).facts
    assert facts["dra_driver"] is True and facts["gpu_drains"] is True
    assert facts["device_taint_rules_version"] == taints
    assert facts["exact_gpus_requested"] is False
    assert rule is not None and rule["apiVersion"] == f"resource.k8s.io/{taints}"
    path = f"/apis/resource.k8s.io/{slices}/resourceslices"
    # the probe: one slice of the driver; the drain: the node's slices of the driver
    assert reads == [
        (path, {"fieldSelector": ["spec.driver=gpu.nvidia.com"], "limit": ["1"]}),
        (path, {"fieldSelector": ["spec.driver=gpu.nvidia.com,spec.nodeName=gpu-a"]})]


@pytest.mark.django_db
def test_a_v1beta1_device_reporting_another_uuid_is_not_drained_alone(kube):
    """The UUID is read from v1beta1's `basic.attributes`: a GPU the driver publishes under
    another UUID (swapped since) is not the one that failed, so its node is cordoned."""
    gpus = kube.gpus["gpu-a"]
    published = gpu_slice("gpu-a", gpus)
    published["spec"]["devices"][2]["attributes"]["uuid"]["string"] = "GPU-someone-else"
    server = _server("v1.33.2", {"resource.k8s.io/v1alpha3", "resource.k8s.io/v1beta2=false"},
                     [_in("v1beta1", published)])
    try:
        kube.configure(server)
        _fail(gpus[2])
        rule, node = server.get("DeviceTaintRule", RULE), server.get("Node", "gpu-a")
    finally:
        server.stop()
    assert rule is None and node["spec"]["unschedulable"] is True


def test_the_fake_converts_a_slice_between_the_versions_shapes():
    v1 = _in("v1", _other_driver("gpu-a"))
    v1["spec"]["devices"][0]["attributes"] = {"uuid": {"string": "GPU-1"}}
    beta = _in("v1beta1", v1)
    assert beta["spec"]["devices"] == [
        {"name": "nic-0", "basic": {"attributes": {"uuid": {"string": "GPU-1"}}}}]
    kubernetes_validate.validate(beta, "1.33.0", strict=True)
    assert dra.slice_as(beta, "v1")["spec"]["devices"] == v1["spec"]["devices"]
