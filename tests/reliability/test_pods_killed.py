"""Pods a node's trouble ended count as jobs killed (docs/reliability.md#the-figures): read from
the fake API server limited by the shipped ClusterRole, every pod valid for its schema; an
evicted pod and one the taint manager deleted count, with the GPUs their processes ran on
and their GPU-hours; a drain's eviction, a preemption and a running pod do not."""

from datetime import UTC, date, datetime, timedelta

import kubernetes_validate
import pytest
from django.utils import timezone

from gpuquota.ingest.models import ProcessRecord
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.inventory.models import Cluster
from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.selectors import reliability_figures
from gpuquota.schedulers.kubernetes.evictions import clusters_pods_killed_observe
from gpuquota.schedulers.models import PodKilled
from gpuquota.schedulers.services import backend_config_update
from tests.factories import AdminFactory, ClusterFactory, GpuClassFactory, NodeFactory, make_gpu
from tests.kubernetes.conftest import TOKEN, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer

pytestmark = [pytest.mark.kubernetes, pytest.mark.postgres, pytest.mark.django_db]
ENDED = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
AS_OF = ENDED + timedelta(days=1)


@pytest.fixture(scope="module", autouse=True)
def _partitions(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        partitions_ensure(days=[date(2026, 11, 3), date(2026, 11, 4)])


def _stamp(at: datetime) -> str:
    return f"{at:%Y-%m-%dT%H:%M:%SZ}"


def _pod(name: str, *, phase="Running", reason=None, target=None, at=ENDED) -> dict:
    status = {"phase": phase, "containerStatuses": [{
        "name": "main", "image": "train:1", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "finishedAt": _stamp(at)}}
        if phase == "Failed" else {"running": {"startedAt": _stamp(at - timedelta(hours=3))}}}]}
    if reason:
        status["reason"] = reason
    if target:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": target,
                                 "lastTransitionTime": _stamp(at)}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "vision", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "image": "train:1"}]}, "status": status}


def test_evicted_and_taint_deleted_pods_are_jobs_killed(db):
    cluster = ClusterFactory(slug="kube", scheduler=Cluster.Scheduler.KUBERNETES)
    node = NodeFactory(cluster=cluster, hostname="gpu-a")
    h100 = GpuClassFactory(name="H100-80GB")
    gpus = [make_gpu(node=node, gpu_class=h100, index=i, at=ENDED - timedelta(days=30))
            for i in range(4)]
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(),
                           rbac_roles=shipped_roles()).start()
    try:
        backend_config_update(cluster=cluster, actor=AdminFactory(), token=server.token,
                              api_url=server.url)
        pods = [_pod("evicted", phase="Failed", reason="Evicted"),
                _pod("tainted", target="DeletionByTaintManager",
                     at=ENDED + timedelta(minutes=30)),
                _pod("drained", target="EvictionByEvictionAPI"),
                _pod("preempted", target="PreemptionByScheduler"),
                _pod("running")]
        for pod in pods:
            kubernetes_validate.validate(pod, "1.34.0", strict=True)
            server.put(pod)
        assert clusters_pods_killed_observe() == {"kube": 2}
        assert clusters_pods_killed_observe() == {"kube": 0}  # kept once
    finally:
        server.stop()
    assert {(p.name, p.reason, p.ended_at) for p in PodKilled.objects.all()} == {
        ("evicted", "Evicted", ENDED),
        ("tainted", "DeletionByTaintManager", ENDED + timedelta(minutes=30))}

    # Their processes (the agents' records): evicted on GPUs 0 and 1 for 2 hours, tainted on
    # GPU 2 for 1 hour, drained on GPU 3.
    records = []
    for pod, indices, hours in (("evicted", (0, 1), 2), ("tainted", (2,), 1.5),
                                ("drained", (3,), 2)):
        start = ENDED - timedelta(hours=hours) + (
            timedelta(minutes=30) if pod == "tainted" else timedelta())
        for i in indices:
            records += [ProcessRecord(
                gpu=gpus[i], window_start=start + timedelta(minutes=m),
                window_end=start + timedelta(minutes=m + 1), pid=100 + i, pid_start=1,
                job_source="kubernetes", job_id=pod, job_account="vision",
                received_at=timezone.now()) for m in range(0, int(hours * 60), 10)]
    ProcessRecord.objects.bulk_create(records)

    killed = {k.job_id: k for k in fleet_history(as_of=AS_OF,
                                                 since=AS_OF - timedelta(days=90)).killed}
    assert {j: (k.gpu_id, k.gpu_hours) for j, k in killed.items()} == {
        "vision/evicted": (gpus[0].pk, 4.0), "vision/tainted": (gpus[2].pk, 1.5)}
    by_key = {f["key"]: f for f in reliability_figures(as_of=AS_OF, group="gpu", days=90)}
    assert (by_key[gpus[0].uuid]["jobs_killed"], by_key[gpus[0].uuid]["gpu_hours_lost"]) == (
        1, 4.0)
    assert by_key[gpus[3].uuid]["jobs_killed"] == 0


def _claim(name: str, device: str, pod: str) -> dict:
    """A claim of `pod` allocated GPU `device` of gpu-a (as the scheduler leaves it)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "vision", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-a",
                 "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]}}


def _rule(name: str, device: str, *, ours: bool) -> dict:
    labels = ({"app.kubernetes.io/managed-by": "gpuquota", "gpuquota.io/cluster": "kube",
               "gpuquota.io/drain": "gpu-failure"} if ours else {"team": "site-ops"})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": labels},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-a",
                                        "device": device},
                     "taint": {"key": "gpuquota.io/gpu-failure" if ours else "maintenance",
                               "value": "xid-79" if ours else "firmware",
                               "effect": "NoExecute"}}}


def test_pods_the_device_taint_manager_deleted_count_only_for_a_failures_taint(db):
    """DRA (Kubernetes 1.37): the device taint eviction controller writes the condition
    DisruptionTarget, reason DeletionByDeviceTaintManager, whoever tainted the device. A
    pod on a device gpuquota drained for a failure, or one the driver tainted itself, was
    killed by a failure; one on a device the site tainted for maintenance was not."""
    cluster = ClusterFactory(slug="kube", scheduler=Cluster.Scheduler.KUBERNETES)
    make_gpu(node=NodeFactory(cluster=cluster, hostname="gpu-a"),
             gpu_class=GpuClassFactory(name="H100-80GB"), index=0,
             at=ENDED - timedelta(days=30))
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
              "metadata": {"name": "gpu-a-gpu.nvidia.com"},
              "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-a",
                       "pool": {"name": "gpu-a", "generation": 1, "resourceSliceCount": 1},
                       "devices": [{"name": f"gpu-{i}", "attributes": {
                           "uuid": {"string": f"GPU-{i}"}}} for i in range(4)]}}
    slice_["spec"]["devices"][3]["taints"] = [{"key": "gpu.nvidia.com/unhealthy",
                                               "value": "xid-79", "effect": "NoExecute"}]
    objects = [slice_, _rule("gq-drain-gpu-a-gpu0", "gpu-0", ours=True),
               _rule("site-maintenance", "gpu-1", ours=False),
               _claim("c-drained", "gpu-0", "drained-gpu"),
               _claim("c-maintained", "gpu-1", "maintained-gpu"),
               _claim("c-healthy", "gpu-2", "healthy-gpu"),
               _claim("c-unhealthy", "gpu-3", "unhealthy-gpu")]
    for name in ("drained-gpu", "maintained-gpu", "unhealthy-gpu"):
        objects.append(_pod(name, target="DeletionByDeviceTaintManager"))
    objects.append(_pod("healthy-gpu"))
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                           version="v1.37.0").start()
    try:
        backend_config_update(cluster=cluster, actor=AdminFactory(), token=server.token,
                              api_url=server.url)
        for obj in objects:
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
            server.put(obj)
        assert clusters_pods_killed_observe() == {"kube": 2}
    finally:
        server.stop()
    assert {(p.name, p.reason) for p in PodKilled.objects.all()} == {
        ("drained-gpu", "DeletionByDeviceTaintManager"),
        ("unhealthy-gpu", "DeletionByDeviceTaintManager")}
