"""Pods the cluster ended for a node's trouble (docs/reliability.md#the-figures), read from
the API server at each observation and kept (`PodKilled`), for the reliability figures'
jobs killed: Kubernetes forgets a pod once it is deleted or garbage-collected.

What counts: a pod the kubelet evicted (`status.reason: Evicted`: node pressure), or one
with a `DisruptionTarget` condition whose reason is the taint manager's (a NoExecute taint:
the node not ready or unreachable), the kubelet's (node pressure, a graceful node
shutdown), or the device taint manager's (`DeletionByDeviceTaintManager`, DRA: a NoExecute
taint on a device its claim holds) where a failure tainted that device: gpuquota's own drain
(a DeviceTaintRule of a GPU failure) or the DRA driver (a taint it publishes on the device in
its ResourceSlice). A site's own DeviceTaintRule may be maintenance, so a pod it evicted is
not counted. An eviction through the Eviction API (a drain) or a preemption is no failure.
A pod deleted between two observations is not seen."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.kubernetes.api import Api
from gpuquota.schedulers.kubernetes.capabilities import taint_rules_version
from gpuquota.schedulers.kubernetes.device_drain import DRAIN_LABEL
from gpuquota.schedulers.kubernetes.slices import (
    claim_devices,
    claim_pods,
    dra_kind,
    slice_devices,
)
from gpuquota.schedulers.models import BackendConfig, PodKilled
from gpuquota.schedulers.services import problem_record

FAILURE_REASONS = ("DeletionByTaintManager", "TerminationByKubelet")
#: The device taint eviction controller's reason (KEP-5055; Kubernetes' devicetainteviction).
DEVICE_TAINT_REASON = "DeletionByDeviceTaintManager"


class DeviceFailures:
    """Which pods a failure's device taint evicted, read from the cluster once, at the first
    pod the device taint manager deleted: the devices under a failure's NoExecute taint
    (gpuquota's drain rules, the driver's own taints) and the pods whose claims hold one."""

    def __init__(self, api: Api):
        self.api = api
        self._pods: set[tuple[str, str]] | None = None

    def _tainted(self) -> set[tuple[str, str, str]]:
        found = set()
        for resource_slice in self.api.list(dra_kind(self.api, "ResourceSlice"), selector=""):
            found |= {d.key for d in slice_devices(resource_slice)
                      if any(t.get("effect") == "NoExecute" for t in d.taints)}
        if taint_rules_version(self.api, self.api.groups()):
            for rule in self.api.list(self.api.kind("DeviceTaintRule"),
                                      f"{DRAIN_LABEL}=gpu-failure"):
                spec = rule.get("spec") or {}
                chosen = spec.get("deviceSelector") or {}
                if (spec.get("taint") or {}).get("effect") == "NoExecute":
                    found.add((chosen.get("driver"), chosen.get("pool"), chosen.get("device")))
        return found

    def _read(self) -> set[tuple[str, str]]:
        tainted = self._tainted()
        return {pod for claim in self.api.list(dra_kind(self.api, "ResourceClaim"), selector="")
                if claim_devices(claim) & tainted for pod in claim_pods(claim)}

    def evicted(self, pod: dict) -> bool:
        """Whether a claim of `pod` holds a device a failure tainted (a refused read: no)."""
        if self._pods is None:
            try:
                self._pods = self._read()
            except BackendError:
                self._pods = set()
        meta = pod["metadata"]
        return (meta.get("namespace", ""), meta["name"]) in self._pods


def _instant(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _ended_at(pod: dict, target: dict | None) -> datetime | None:
    """When the pod was ended: its DisruptionTarget condition, else its containers' end."""
    if target and _instant(target.get("lastTransitionTime")):
        return _instant(target["lastTransitionTime"])
    ends = [_instant(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in (pod.get("status") or {}).get("containerStatuses") or []]
    return max(filter(None, ends), default=None)


def pod_failure(pod: dict, devices: DeviceFailures | None = None,
                ) -> tuple[str, datetime | None] | None:
    """(why, when) if a node's or a failed device's trouble ended the pod, else None."""
    status = pod.get("status") or {}
    target = next((c for c in status.get("conditions") or []
                   if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    if status.get("reason") == "Evicted":
        return "Evicted", _ended_at(pod, target)
    if target and target.get("reason") in FAILURE_REASONS:
        return target["reason"], _ended_at(pod, target)
    if target and target.get("reason") == DEVICE_TAINT_REASON and devices is not None \
            and devices.evicted(pod):
        return target["reason"], _ended_at(pod, target)
    return None


def cluster_pods_killed_observe(*, cluster: Cluster, api: Api, now: datetime) -> int:
    """Record the pods the cluster shows ended by a node's trouble; returns how many new."""
    try:
        pods = api.pods_list()
    except BackendError as exc:
        problem_record(cluster=cluster, summary=f"Reading pods: {exc.message}",
                       detail=exc.detail)
        return 0
    found, devices = {}, DeviceFailures(api)
    for pod in pods:
        failure = pod_failure(pod, devices)
        if failure is not None:
            meta = pod["metadata"]
            found[meta["uid"]] = PodKilled(
                cluster=cluster, namespace=meta.get("namespace", ""), name=meta["name"],
                uid=meta["uid"], reason=failure[0], ended_at=(failure[1] or now).replace(
                    microsecond=0))
    known = set(PodKilled.objects.filter(cluster=cluster, uid__in=list(found))
                .values_list("uid", flat=True))
    new = [row for uid, row in found.items() if uid not in known]
    PodKilled.objects.bulk_create(new, ignore_conflicts=True)
    return len(new)


def clusters_pods_killed_observe() -> dict[str, int]:
    """Every Kubernetes cluster whose backend writes: the new pods killed, by slug."""
    now = timezone.now().replace(microsecond=0)
    seen = {}
    for config in BackendConfig.objects.filter(
            mode=BackendConfig.Mode.WRITE,
            cluster__scheduler=Cluster.Scheduler.KUBERNETES).select_related("cluster"):
        backend = backend_for(config.cluster, config)
        seen[config.cluster.slug] = cluster_pods_killed_observe(
            cluster=config.cluster, api=backend.api, now=now)
    return seen
