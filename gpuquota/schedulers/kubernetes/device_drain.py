"""Draining one GPU on Kubernetes through DRA (docs/kubernetes.md#drains), and reading how far
a drain got.

Where the NVIDIA DRA driver publishes the node's GPUs in ResourceSlices (device `gpu-<index>`
in the pool named after the node) and the API server serves DeviceTaintRules (KEP-5055:
resource.k8s.io/v1alpha3 in 1.33 to 1.35 where the alpha API is switched on, v1beta2 in 1.36,
v1 from 1.37), the drain of one GPU is a DeviceTaintRule `gq-drain-<node>-gpu<index>`
selecting that device, tainted `gpuquota.io/gpu-failure=<reason>`: `NoSchedule` for a lesser
event (no new claim is given the GPU; its pods finish), `NoExecute` for a critical one (the
device taint eviction controller also deletes the pods whose claims hold it). The node's
other GPUs stay in service. Elsewhere the node is cordoned and tainted (drain.py).

Progress, as Slurm's DRAINING and DRAINED: a drained GPU is draining while a pod that a
ResourceClaim holding it is reserved for still runs; a cordoned node while a pod other than a
DaemonSet's or a static (mirror) pod still runs on it, as `kubectl drain` counts them."""

from __future__ import annotations

import json
import re

from gpuquota.schedulers.backend import BackendError, SchedulerObject, owned_name
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.kubernetes.capabilities import dra_served, taint_rules_version
from gpuquota.schedulers.kubernetes.drain import TAINT_KEY, label_value, node_cordoned
from gpuquota.schedulers.kubernetes.objects import labels

DRAIN_LABEL = "gpuquota.io/drain"
_FINISHED = ("Succeeded", "Failed")


def rule_name(hostname: str, index: int) -> str:
    """`gq-drain-<node>-gpu<index>`: a DNS subdomain (the node's name lower-cased, any other
    character a hyphen)."""
    node = re.sub(r"[^a-z0-9.-]+", "-", hostname.lower()).strip("-.")
    return owned_name("drain", node, f"gpu{index}")


def drain_rule(*, hostname: str, index: int, reason: str, at_once: bool, driver: str,
               cluster_slug: str, api_version: str) -> dict:
    """The DeviceTaintRule holding GPU `index` of `hostname` for a failure."""
    return {"apiVersion": api_version, "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(hostname, index),
                         "labels": labels(cluster_slug, **{DRAIN_LABEL: "gpu-failure"})},
            "spec": {"deviceSelector": {"driver": driver, "pool": hostname,
                                        "device": f"gpu-{index}"},
                     "taint": {"key": TAINT_KEY, "value": label_value(reason),
                               "effect": "NoExecute" if at_once else "NoSchedule"}}}


def as_object(manifest: dict) -> SchedulerObject:
    """The rule as the reconcile loop plans and observes it (kind, name, managed fields)."""
    def canonical(value) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    return SchedulerObject("DeviceTaintRule", manifest["metadata"]["name"], {
        "labels": canonical(manifest["metadata"]["labels"]),
        "spec": canonical(manifest["spec"])})


def _published(api: Api, *, driver: str, hostname: str, index: int, uuid: str) -> bool:
    """Whether a ResourceSlice of `driver` lists GPU `index` of `hostname` (by the UUID the
    driver gives it, where it gives one)."""
    for found in api.list(KINDS["ResourceSlice"], selector=""):
        spec = found.get("spec", {})
        if spec.get("driver") != driver or (spec.get("pool") or {}).get("name") != hostname:
            continue
        for device in spec.get("devices") or []:
            if device.get("name") == f"gpu-{index}":
                told = (device.get("attributes") or {}).get("uuid", {}).get("string")
                return told in (None, uuid)
    return False


def taints_version(api: Api, *, driver: str, hostname: str, index: int, uuid: str) -> str:
    """The DeviceTaintRule version to drain this GPU with, "" where it cannot be drained
    alone (no DRA, no rules served, the driver does not publish the GPU)."""
    groups = api.groups()
    if not dra_served(api.version(), groups):
        return ""
    try:
        published = _published(api, driver=driver, hostname=hostname, index=index, uuid=uuid)
    except BackendError:  # an older ClusterRole without ResourceSlices: drain the node
        return ""
    return taint_rules_version(api, groups) if published else ""


def _rule(api: Api, name: str) -> dict | None:
    selector = f"{DRAIN_LABEL}=gpu-failure"
    return next((r for r in api.list(api.kind("DeviceTaintRule"), selector)
                 if r["metadata"]["name"] == name), None)


def rule_write(api: Api, manifest: dict) -> None:
    """Create the rule, or bring gpuquota's existing one to `manifest` (an escalation to
    NoExecute); done when reading it back shows the taint."""
    kind, name = api.kind("DeviceTaintRule"), manifest["metadata"]["name"]
    current = _rule(api, name)
    if current is None:
        api.create(kind, manifest)
    else:
        api.patch(kind, name, "", {"metadata": {
            "labels": manifest["metadata"]["labels"],
            "resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": manifest["spec"]})
    after = _rule(api, name)
    taint = (after or {}).get("spec", {}).get("taint", {})
    wanted = manifest["spec"]["taint"]
    if (taint.get("key"), taint.get("effect")) != (wanted["key"], wanted["effect"]):
        raise BackendError(f"The API accepted DeviceTaintRule {name} but it does not show.")


def rule_delete(api: Api, name: str) -> bool:
    """Delete gpuquota's rule `name`, read back; False when it was gone already."""
    if _rule(api, name) is None:
        return False
    api.delete(api.kind("DeviceTaintRule"), name, "")
    if _rule(api, name) is not None:
        raise BackendError(f"The API accepted the deletion of DeviceTaintRule {name} but it "
                           "stays.")
    return True


def _running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in _FINISHED


def gpu_progress(api: Api, *, driver: str, hostname: str, index: int) -> str:
    """"draining" while a running pod uses the GPU through a claim, "drained" when none does,
    "" when gpuquota's rule is not there."""
    name = rule_name(hostname, index)
    if _rule(api, name) is None:
        return ""
    device = (driver, hostname, f"gpu-{index}")
    users = set()
    for claim in api.list(KINDS["ResourceClaim"], selector=""):
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results", [])
        if any((r.get("driver"), r.get("pool"), r.get("device")) == device for r in results):
            users |= {(claim["metadata"].get("namespace", ""), u.get("name"))
                      for u in status.get("reservedFor") or [] if u.get("resource") == "pods"}
    if not users:
        return "drained"
    pods = api.pods_list()
    busy = any(_running(p) and (p["metadata"].get("namespace"), p["metadata"]["name"]) in users
               for p in pods)
    return "draining" if busy else "drained"


def _counted(pod: dict) -> bool:
    """A pod that a drain waits for: not a DaemonSet's, not a static pod's mirror."""
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def node_progress(api: Api, hostname: str) -> str:
    """"draining" while pods still run on gpuquota's cordoned node, "drained" when none
    does, "" when gpuquota's taint is not on it."""
    if not node_cordoned(api, hostname):
        return ""
    busy = any(p.get("spec", {}).get("nodeName") == hostname and _running(p) and _counted(p)
               for p in api.pods_list())
    return "draining" if busy else "drained"
