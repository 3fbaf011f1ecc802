"""A GPU failure on Kubernetes drains that GPU alone where the cluster uses DRA for its GPUs
and serves DeviceTaintRules, against the fake API server of each release (schema-validated
writes, the shipped ClusterRole) playing the allocator and the device taint eviction
controller; elsewhere the node is cordoned as before. Progress (draining, drained) is read
from the pods still using the GPU or the node."""

import uuid
from datetime import timedelta

import pytest
import time_machine

from gpuquota.core.models import AuditEntry
from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drains import drain_release, drains_apply, drains_observe
from gpuquota.reliability.held import drained_gpu_ids
from gpuquota.reliability.models import Drain
from gpuquota.schedulers.models import Capabilities, Drift, ManagedObject, ReconcileRun
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import (
    NOW,
    TOKEN,
    claim_on,
    dra_server,
    gpu_slice,
    shipped_roles,
    shipped_rules,
)
from tests.kubernetes.fake_apiserver import FakeApiServer

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
RULE = "gq-drain-gpu-a-gpu2"
SELECTOR = {"driver": "gpu.nvidia.com", "pool": "gpu-a", "device": "gpu-2"}


def _node(server, name: str = "gpu-a") -> None:
    server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}})


def _fail(gpu, xid: int, at=NOW) -> list[Drain]:
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=at, type="xid",
                            xid=xid, received_at=at)
    return drains_apply(since=at - timedelta(minutes=1), now=at)


def _pod_on(server, name: str, *, node: str = "gpu-a", claim: str | None = None,
            phase: str = "Running", owner: str = "ReplicaSet") -> None:
    spec = {"nodeName": node, "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "train:1"}]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    server.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "speech",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-o",
                             "uid": f"uid-{name}-o"}]},
        "spec": spec, "status": {"phase": phase}})


def _reconcile(kube, **kwargs):
    with time_machine.travel(NOW, tick=False):
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW, **kwargs)
    assert summary.outcome in ("ok", "dry_run"), summary.error
    return summary


@pytest.mark.parametrize(("version", "runtime_config", "served"), [
    ("v1.34.1", {"resource.k8s.io/v1alpha3"}, "v1alpha3"),
    ("v1.36.0", set(), "v1beta2"),
    ("v1.37.0", set(), "v1"),
])
def test_a_critical_failure_drains_its_gpu_alone(kube, version, runtime_config, served):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version=version, runtime_config=runtime_config,
                        slices=[gpu_slice("gpu-a", gpus)])
    try:
        _node(server)
        kube.configure(server)
        [drain] = _fail(gpus[2], 79)
        rule = server.get("DeviceTaintRule", RULE)
        node = server.get("Node", "gpu-a")
        posted = {r.path for r in server.writes() if "devicetaintrules" in r.path}
        seen = len(server.requests)
        _reconcile(kube)  # Kueue's objects; the rule is planned: neither written nor deleted
        kept = [r for r in server.requests[seen:] if "devicetaintrules" in r.path
                and r.method != "GET"]
        seen = len(server.requests)
        _reconcile(kube)
        again = [r for r in server.requests[seen:] if r.method != "GET"]
        caps = Capabilities.objects.get(cluster=kube.cluster)
        drain_release(drain=drain, by=kube.admin, fix="replaced", at=NOW + timedelta(hours=1))
        gone = server.get("DeviceTaintRule", RULE)
        seen = len(server.requests)
        _reconcile(kube)
        after = [r for r in server.requests[seen:] if r.method != "GET"]
    finally:
        server.stop()
    assert (drain.state, drain.scope) == ("drained", "gpu")
    assert posted == {f"/apis/resource.k8s.io/{served}/devicetaintrules"}
    assert rule["spec"]["deviceSelector"] == SELECTOR
    assert rule["spec"]["taint"] == {"key": "gpuquota.io/gpu-failure", "value": "xid-79",
                                     "effect": "NoExecute"}
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuquota"
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    # only the failed GPU is held out: the node's other three stay in capacity and lending
    assert drained_gpu_ids(gpu_ids=[g.pk for g in gpus], at=NOW) == {gpus[2].pk}
    assert kept == [] and again == []
    assert caps.facts["gpu_drains"] is True
    assert any(n.startswith("A GPU failure drains that GPU alone") for n in caps.notes)
    assert gone is None and after == []
    assert not ManagedObject.objects.filter(kind="DeviceTaintRule").exists()
    entry = AuditEntry.objects.get(action="node_drain")
    assert entry.changes["scope"] == "gpu"


def test_a_lesser_event_lets_pods_finish_then_a_critical_one_evicts_them(kube):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        _node(server)
        kube.configure(server)
        _pod_on(server, "train")
        claim_on(server, gpus[2], "train-gpu", "train")
        _pod_on(server, "other")
        claim_on(server, gpus[0], "other-gpu", "other")
        with time_machine.travel(NOW, tick=False):
            [drain] = _fail(gpus[2], 63)  # row remapping recorded: after the jobs
            lesser = server.get("DeviceTaintRule", RULE)["spec"]["taint"]["effect"]
            running = server.get("Pod", "train", "speech")["metadata"].get("deletionTimestamp")
            drains_observe(now=NOW)
            first = Drain.objects.get().progress
            [same] = _fail(gpus[2], 79, at=NOW + timedelta(seconds=5))
        escalated = server.get("DeviceTaintRule", RULE)["spec"]["taint"]
        evicted = server.get("Pod", "train", "speech")
        with time_machine.travel(NOW + timedelta(seconds=10), tick=False):
            drains_observe(now=NOW + timedelta(seconds=10))
            still = Drain.objects.get().progress
        with time_machine.travel(NOW + timedelta(seconds=40), tick=False):
            changed = drains_observe(now=NOW + timedelta(seconds=40))
        other = server.get("Pod", "other", "speech")
    finally:
        server.stop()
    assert (lesser, running, first) == ("NoSchedule", None, "draining")
    assert same.pk == drain.pk and escalated == {"key": "gpuquota.io/gpu-failure",
                                                 "value": "xid-79", "effect": "NoExecute"}
    assert evicted["status"]["conditions"][-1]["reason"] == "DeletionByDeviceTaintManager"
    assert still == "draining"  # its grace period is not over
    assert [d.progress for d in changed] == ["drained"]
    assert other is not None and not other["metadata"].get("deletionTimestamp")


def test_a_second_gpu_failing_on_the_node_is_drained_alone_too(kube):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        _node(server)
        kube.configure(server)
        _fail(gpus[2], 79)
        _fail(gpus[0], 48, at=NOW + timedelta(minutes=1))
        rules = sorted(r["metadata"]["name"] for r in server.items("DeviceTaintRule"))
    finally:
        server.stop()
    assert rules == ["gq-drain-gpu-a-gpu0", RULE]
    assert sorted(Drain.objects.values_list("gpu__index", "scope")) == [(0, "gpu"), (2, "gpu")]
    assert drained_gpu_ids(gpu_ids=[g.pk for g in gpus], at=NOW + timedelta(minutes=1)) == {
        gpus[0].pk, gpus[2].pk}


def test_a_rule_deleted_behind_gpuquotas_back_is_drift_shown_in_the_dry_run_and_repaired(kube):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        _node(server)
        kube.configure(server)
        _fail(gpus[2], 79)
        server.remove("DeviceTaintRule", RULE)
        _reconcile(kube, dry_run=True)
        dry = ReconcileRun.objects.get(outcome="dry_run")
        assert server.get("DeviceTaintRule", RULE) is None  # a dry run writes nothing
        _reconcile(kube)
        repaired = server.get("DeviceTaintRule", RULE)
    finally:
        server.stop()
    assert any(c.startswith("kubectl create") and RULE in c for c in dry.commands)
    drift = Drift.objects.get(object_name=RULE)
    assert drift.kind == "missing" and drift.repaired_at == NOW
    assert repaired["spec"]["taint"]["effect"] == "NoExecute"
    assert AuditEntry.objects.filter(action="scheduler_drift_repair").exists()


@pytest.mark.parametrize(("version", "runtime_config", "slices", "note"), [
    ("v1.34.2", set(), True, "has them only as resource.k8s.io/v1alpha3, an alpha API"),
    ("v1.36.0", set(), False, None),  # DRA, but GPUs come from the device plugin
    # DRA's slices (v1beta1), but no DeviceTaintRules before 1.33 (1.33 with them: a GPU
    # drained alone, test_dra_versions.py)
    ("v1.32.0", set(), True, "Kubernetes 1.32 has none (they came as alpha in 1.33)"),
])
def test_without_dra_device_taints_the_node_is_cordoned(kube, version, runtime_config, slices,
                                                        note):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version=version, runtime_config=runtime_config,
                        slices=[gpu_slice("gpu-a", gpus)] if slices else ())
    if not slices:
        server.remove("ResourceSlice", "gpu-a-gpu.nvidia.com")
    try:
        _node(server)
        kube.configure(server)
        [drain] = _fail(gpus[2], 79)
        node = server.get("Node", "gpu-a")
        _reconcile(kube)
        caps = Capabilities.objects.get(cluster=kube.cluster)
    finally:
        server.stop()
    assert (drain.state, drain.scope) == ("drained", "node")
    assert node["spec"]["unschedulable"] is True
    assert drained_gpu_ids(gpu_ids=[g.pk for g in gpus], at=NOW) == {g.pk for g in gpus}
    assert caps.facts["gpu_drains"] is False
    if note:
        assert any(n.startswith("A GPU failure drains its whole node") and note in n
                   for n in caps.notes)


def test_a_cordoned_node_is_draining_while_pods_other_than_daemonsets_run(kube):
    server = dra_server(version="v1.34.2")  # no DeviceTaintRules: the node is cordoned
    try:
        _node(server)
        kube.configure(server)
        _pod_on(server, "exporter", owner="DaemonSet")
        _pod_on(server, "train")
        _pod_on(server, "elsewhere", node="gpu-b")
        [drain] = _fail(kube.gpus["gpu-a"][1], 63)
        drains_observe(now=NOW)
        drain.refresh_from_db()
        first = drain.progress
        _pod_on(server, "train", phase="Succeeded")
        changed = drains_observe(now=NOW + timedelta(minutes=1))
    finally:
        server.stop()
    assert (drain.scope, first) == ("node", "draining")
    assert [(d.progress, d.progress_at) for d in changed] == [
        ("drained", NOW + timedelta(minutes=1))]


def test_a_rule_gone_before_the_return_leaves_no_drift_behind(kube):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        _node(server)
        kube.configure(server)
        [drain] = _fail(gpus[2], 79)
        server.remove("DeviceTaintRule", RULE)  # someone deleted it; the return comes first
        drain_release(drain=drain, by=kube.admin, fix="replaced", at=NOW + timedelta(hours=1))
        _reconcile(kube)
    finally:
        server.stop()
    assert not ManagedObject.objects.filter(kind="DeviceTaintRule").exists()
    assert not Drift.objects.exists()
    assert AuditEntry.objects.filter(action="node_resume").get().changes["scope"] == "gpu"


def test_an_older_clusterrole_without_resourceslices_drains_the_node(kube):
    gpus = kube.gpus["gpu-a"]
    rules = [r for r in shipped_rules() if "resourceslices" not in r["resources"]]
    server = FakeApiServer(token=TOKEN, rbac_rules=rules, rbac_roles=shipped_roles(),
                           version="v1.37.0").start()
    try:
        server.put(gpu_slice("gpu-a", gpus))
        _node(server)
        kube.configure(server)
        [drain] = _fail(gpus[2], 79)
        node = server.get("Node", "gpu-a")
        _reconcile(kube)
    finally:
        server.stop()
    assert (drain.state, drain.scope) == ("drained", "node")
    assert node["spec"]["unschedulable"] is True
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.facts["gpu_drains"] is False
    assert any("may not list ResourceSlices" in n for n in caps.notes)
