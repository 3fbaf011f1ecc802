"""Zero-use pods stopped through the Kubernetes backend where the site opted in (docs/jobs.md,
Stopping), against the fake API server limited by the shipped ClusterRole, every object
valid for its schema: a bare pod is deleted, a batch Job's pod stops with its Job
suspended, a Kueue Job's with its Workload deactivated; a ReplicaSet's pod is left (its
controller would start another) and the refusal audited; a pod outside the policy is only
warned. Each read back from the API server, each audited."""

import json
from datetime import timedelta

import kubernetes_validate
import pytest

from gpuquota.core.models import AuditEntry
from gpuquota.jobs.alerts import jobs_zero_use_scan
from gpuquota.jobs.models import Job, JobGpu
from gpuquota.mail.models import MailDelivery
from gpuquota.outbox.models import Notification
from reports.channels import channel_add
from tests.factories import AdminFactory, UserFactory
from tests.jobs.shapes import T0
from tests.jobs.world import samples_write
from tests.kubernetes.conftest import TOKEN, KubeSite, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer
from tests.kubernetes.fake_apiserver.kueue_schemas import kueue_errors

pytestmark = [pytest.mark.kubernetes, pytest.mark.postgres, pytest.mark.django_db]
MINUTE = timedelta(minutes=1)
RELEASE = "1.34.0"


def _owner(kind: str, name: str, uid: str, api_version: str = "batch/v1") -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def _pod(name: str, namespace: str, *, owner: dict | None = None) -> dict:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-pod-{name}",
            "creationTimestamp": "2026-11-02T07:59:00Z"}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "train:1",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def _batch_job(name: str, namespace: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-job-{name}",
                         "labels": labels or {}},
            "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never",
                                                             "containers": [
                                                                 {"name": "main",
                                                                  "image": "train:1"}]}}}}


def _workload(job: dict) -> dict:
    meta = job["metadata"]
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": f"job-{meta['name']}-3c1a", "namespace": meta["namespace"],
                         "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                         "ownerReferences": [_owner("Job", meta["name"], meta["uid"])]},
            "spec": {"active": True, "queueName": "gq-vision", "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}}


@pytest.fixture
def server():
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(),
                           rbac_roles=shipped_roles()).start()
    yield server
    server.stop()


@pytest.fixture
def cluster_objects(server):
    """What runs on the cluster, each object valid for its schema."""
    train, queued = _batch_job("train", "vision"), _batch_job(
        "queued", "vision-dev", {"kueue.x-k8s.io/queue-name": "gq-vision"})
    objects = [
        _pod("notebook", "vision"),
        train, _pod("train-x7k2p", "vision", owner=_owner("Job", "train", "uid-job-train")),
        queued, _pod("queued-4mz8q", "vision-dev",
                     owner=_owner("Job", "queued", "uid-job-queued")),
        _pod("serve-7d9f-x2", "speech", owner=_owner("ReplicaSet", "serve-7d9f", "uid-rs",
                                                      api_version="apps/v1")),
        _pod("lab", "research"),
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, RELEASE, strict=True)
        server.put(obj)
    workload = _workload(queued)
    assert kueue_errors(workload) == []
    server.put(workload)
    return server


def _jobs(kube: KubeSite, server) -> dict[str, Job]:
    """gpuquota's jobs of those pods (as the agents' process records make them), one GPU
    each, idle from T0 (memory held), their owner a member of the team."""
    kube.configure(server)
    member = UserFactory(username="mem1")
    gpus = kube.gpus["gpu-a"] + kube.gpus["gpu-b"]
    jobs = {}
    for gpu, (pod, namespace, team) in zip(gpus, [
            ("notebook", "vision", "vision"), ("train-x7k2p", "vision", "vision"),
            ("queued-4mz8q", "vision-dev", "vision"), ("serve-7d9f-x2", "speech", "speech"),
            ("lab", "research", None)], strict=False):
        job = Job.objects.create(cluster=kube.cluster, source=Job.Source.KUBERNETES,
                                 job_id=pod, account=namespace, started_at=T0, state="RUNNING",
                                 gpus_held=1, owner=member,
                                 team=kube.teams[team] if team else None)
        JobGpu.objects.create(job=job, gpu=gpu)
        samples_write(gpu, [0] * 25, start=T0)
        jobs[pod] = job
    return jobs


def test_zero_use_pods_are_stopped_by_what_runs_them(settings, cluster_objects):
    settings.JOBS_ZERO_USE_STAGING_S = 600
    settings.JOBS_ZERO_USE_CANCEL_AFTER_S = 600
    settings.JOBS_ZERO_USE_LAST_WARNING_S = 300
    settings.JOBS_ZERO_USE_CANCEL = "kube:vision,kube:vision-dev,@speech"
    settings.JOBS_ZERO_USE_REQUEUE = "kube"  # no requeue on Kubernetes: asked, not done
    server = cluster_objects
    kube = KubeSite()
    jobs = _jobs(kube, server)
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    channel_add(team=kube.teams["vision"], kind="slack", name="ops",
                url="http://127.0.0.1:9/slack", by=AdminFactory(username="root"))
    assert jobs_zero_use_scan(now=T0 + 11 * MINUTE) == 5  # every one warned
    jobs_zero_use_scan(now=T0 + 16 * MINUTE)  # the last warning, where opted in
    assert MailDelivery.objects.filter(template="jobs_zero_use_last").count() == 4
    assert server.writes() == []  # nothing stopped before its time
    jobs_zero_use_scan(now=T0 + 21 * MINUTE)

    assert server.get("Pod", "notebook", "vision") is None
    delete = next(r for r in server.writes() if r.method == "DELETE")
    assert delete.path == "/api/v1/namespaces/vision/pods/notebook"
    assert delete.body["preconditions"]["uid"] == "uid-pod-notebook"
    assert server.get("Job", "train", "vision")["spec"]["suspend"] is True
    workload = server.get("Workload", "job-queued-3c1a", "vision-dev")
    assert workload["spec"]["active"] is False
    assert server.get("Job", "queued", "vision-dev")["spec"]["suspend"] is False  # Kueue's
    assert server.get("Pod", "serve-7d9f-x2", "speech") is not None
    assert server.get("Pod", "lab", "research") is not None

    stopped = {e.object_id: e for e in AuditEntry.objects.filter(
        action="jobs.zero_use_cancelled")}
    for job in jobs.values():
        job.refresh_from_db()
    assert {p: (j.zero_use_stopped_how, stopped[str(j.pk)].changes["target"])
            for p, j in jobs.items() if str(j.pk) in stopped} == {
        "notebook": ("deleted", "notebook"),
        "train-x7k2p": ("suspended", "Job vision/train"),
        "queued-4mz8q": ("suspended", "Workload vision-dev/job-queued-3c1a")}
    refused = AuditEntry.objects.get(action="jobs.zero_use_cancel_failed")
    assert refused.object_id == str(jobs["serve-7d9f-x2"].pk)
    assert "ReplicaSet serve-7d9f" in refused.reason
    assert jobs["lab"].zero_use_last_warned_at is None  # outside the policy: warned only
    assert MailDelivery.objects.filter(template="jobs_zero_use_cancelled").count() == 3

    writes = len(server.writes())
    jobs_zero_use_scan(now=T0 + 22 * MINUTE)  # once; the refusal is retried 15 min later
    assert len(server.writes()) == writes
    # The team's channel heard each step of its three pods once (Slack: the text fallback).
    told = [(n.event, json.loads(n.body)["text"]) for n in Notification.objects.order_by("id")]
    assert [e for e, _ in told] == ["job.zero_use_warned"] * 3 + [
        "job.zero_use_last_warning"] * 3 + ["job.zero_use_stopped"] * 3
    stops = [t for e, t in told if e == "job.zero_use_stopped"]
    assert "notebook deleted" in stops[0] and "the pod is gone" in stops[0]
    assert "train-x7k2p suspended" in stops[1] and "spec.suspend: false" in stops[1]
    assert "queued-4mz8q suspended" in stops[2] and "mem1" in stops[2]
