"""Stopping a zero-use pod (docs/jobs.md#stopping), by what runs it, so that nothing starts
it again behind gpuquota's back:

- a bare pod (no controller) is deleted (with its uid as precondition: a newer pod of the
  same name is left alone);
- a pod of a batch Job is stopped with its Job: where Kueue manages the Job (its
  `kueue.x-k8s.io/queue-name` label) the Job's Workload is deactivated (`spec.active:
  false`: Kueue evicts it and suspends the Job, which keeps its place to resume from);
  else the Job is suspended (`spec.suspend: true`: the Job controller ends its pods);
- a pod of any other controller (a ReplicaSet, a StatefulSet, a JobSet...) is left alone
  and the refusal says why: its controller would start another.

Each write is read back. The agents name a pod by its hostname (its name, unless the pod
sets `spec.hostname`) and its namespace; the job's run is the pod created no later than it
was first seen."""

from __future__ import annotations

import re
from datetime import datetime

from gpuquota.core.names import dns1123_label_error
from gpuquota.schedulers.backend import BackendError, JobStopped
from gpuquota.schedulers.kubernetes.api import Api

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a DNS-1123 subdomain
RUNNING_PHASES = ("Pending", "Running")


def _instant(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _pod(api: Api, name: str, namespace: str, started_at: datetime | None) -> dict:
    if not POD_NAME.match(name):
        raise BackendError(f"Not a pod name: {name!r}.")
    error = dns1123_label_error(namespace, what=f"The namespace {namespace!r}")
    if error:
        raise BackendError(error)
    pod = api.pod_find(name, namespace)
    if pod is None:
        raise BackendError(f"The cluster has no pod {namespace}/{name} (the agents name a pod "
                           "by its hostname: a pod that sets spec.hostname is not found).")
    phase = (pod.get("status") or {}).get("phase", "")
    if phase not in RUNNING_PHASES or pod["metadata"].get("deletionTimestamp"):
        raise BackendError(f"The pod {namespace}/{name} is {phase or 'ending'}, not running: "
                           "left alone.")
    created = _instant(pod["metadata"].get("creationTimestamp"))
    if started_at is not None and created is not None and created > started_at:
        raise BackendError(f"The pod {namespace}/{name} was created at {created:%Y-%m-%d %H:%M}"
                           ", after the job was seen: another pod, left alone.")
    return pod


def _controller(pod: dict) -> dict | None:
    return next((o for o in pod["metadata"].get("ownerReferences") or []
                 if o.get("controller")), None)


def _pod_delete(api: Api, pod: dict) -> JobStopped:
    meta = pod["metadata"]
    api.pod_delete(meta["name"], meta["namespace"], meta["uid"])
    after = api.pod_find(meta["name"], meta["namespace"])
    if after is not None and after["metadata"].get("uid") == meta["uid"] and not \
            after["metadata"].get("deletionTimestamp"):
        raise BackendError(f"The API accepted the deletion of pod {meta['namespace']}/"
                           f"{meta['name']} but it is still there.")
    return JobStopped("deleted")


def _workloads(api: Api, job: dict) -> list[dict]:
    meta = job["metadata"]
    return [w for w in api.list(api.kind("Workload"), f"{JOB_UID_LABEL}={meta['uid']}")
            if w["metadata"].get("namespace") == meta["namespace"]]


def _workload_deactivate(api: Api, job: dict) -> JobStopped:
    meta = job["metadata"]
    found = _workloads(api, job)
    if not found:
        raise BackendError(f"Kueue manages Job {meta['namespace']}/{meta['name']} but it has "
                           "no Workload (label kueue.x-k8s.io/job-uid): left alone.")
    kind = api.kind("Workload")
    for workload in found:
        api.patch(kind, workload["metadata"]["name"], meta["namespace"],
                  {"metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]},
                   "spec": {"active": False}})
    if any(w["spec"].get("active", True) for w in _workloads(api, job)):
        raise BackendError(f"The API accepted the deactivation of Job {meta['namespace']}/"
                           f"{meta['name']}'s Workload but it is still active.")
    names = ", ".join(w["metadata"]["name"] for w in found)
    return JobStopped("suspended", target=f"Workload {meta['namespace']}/{names}",
                      note="Kueue evicts the Workload and suspends its Job; setting "
                           "spec.active back to true resumes it")


def _job_suspend(api: Api, job: dict) -> JobStopped:
    meta = job["metadata"]
    api.batch_job_patch(meta["name"], meta["namespace"], {
        "metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"suspend": True}})
    after = api.batch_job_find(meta["name"], meta["namespace"])
    if not (after and after["spec"].get("suspend")):
        raise BackendError(f"The API accepted the suspension of Job {meta['namespace']}/"
                           f"{meta['name']} but it is not suspended.")
    return JobStopped("suspended", target=f"Job {meta['namespace']}/{meta['name']}",
                      note="the Job controller ends its pods; spec.suspend: false resumes it")


def pod_stop(api: Api, name: str, namespace: str, *,
             started_at: datetime | None = None) -> JobStopped:
    """Stop the running pod by what runs it (the module's rules), read back; a
    BackendError when it is not there, not running, another pod, or run by another kind."""
    pod = _pod(api, name, namespace, started_at)
    owner = _controller(pod)
    if owner is None:
        return _pod_delete(api, pod)
    if owner.get("kind") != "Job" or not owner.get("apiVersion", "").startswith("batch/"):
        raise BackendError(f"The pod {namespace}/{name} is run by {owner.get('kind')} "
                           f"{owner.get('name')}, which would start another: gpuquota stops "
                           "bare pods and batch Jobs only.")
    job = api.batch_job_find(owner["name"], namespace)
    if job is None or job["metadata"].get("uid") != owner.get("uid"):
        raise BackendError(f"The pod {namespace}/{name}'s Job {owner['name']} is gone.")
    if QUEUE_LABEL in (job["metadata"].get("labels") or {}):
        return _workload_deactivate(api, job)
    return _job_suspend(api, job)
