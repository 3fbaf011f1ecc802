"""Draining one GPU on Kubernetes through DRA (docs/kubernetes.md#drains).

Where the NVIDIA DRA driver publishes the node's GPUs in ResourceSlices (device `gpu-<index>`
in the pool named after the node) and the API server serves DeviceTaintRules (KEP-5055:
resource.k8s.io/v1alpha3 in 1.33 to 1.35 where the alpha API is switched on, v1beta2 in 1.36,
v1 from 1.37; the ResourceSlices read in v1beta1, v1beta2 or v1, whichever is served), the
drain of one GPU is a DeviceTaintRule `gq-drain-<node>-gpu<index>`
selecting that device, tainted `gpuquota.io/gpu-failure=<reason>`: `NoSchedule` for a lesser
event (no new claim is given the GPU; its pods finish), `NoExecute` for a critical one (the
device taint eviction controller also deletes the pods whose claims hold it). The node's
other GPUs stay in service. Elsewhere the node is cordoned and tainted (drain.py). How far a
drain got: drain_progress.py."""

from __future__ import annotations

import json
import re

from gpuquota.schedulers.backend import BackendError, SchedulerObject, owned_name
from gpuquota.schedulers.kubernetes.api import Api
from gpuquota.schedulers.kubernetes.capabilities import taint_rules_version
from gpuquota.schedulers.kubernetes.drain import TAINT_KEY, label_value
from gpuquota.schedulers.kubernetes.objects import labels
from gpuquota.schedulers.kubernetes.slices import dra_kind, served_version, slice_devices

DRAIN_LABEL = "gpuquota.io/drain"


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
    """Whether a ResourceSlice of `driver` on `hostname` lists GPU `index` in the node's pool
    (by the UUID the driver gives it, where it gives one), in whichever version the cluster
    serves (slices.py reads each version's shape); only that node's slices are read."""
    kind = dra_kind(api, "ResourceSlice")
    for resource_slice in api.list(kind, selector="",
                                   fields=f"spec.driver={driver},spec.nodeName={hostname}"):
        for device in slice_devices(resource_slice):
            if device.pool == hostname and device.name == f"gpu-{index}":
                told = device.attributes.get("uuid", {}).get("string")
                return told in (None, uuid)
    return False


def taints_version(api: Api, *, driver: str, hostname: str, index: int, uuid: str) -> str:
    """The DeviceTaintRule version to drain this GPU with, "" where it cannot be drained
    alone (no DRA, no rules served, the driver does not publish the GPU)."""
    groups = api.groups()
    if not served_version(api, groups, "ResourceSlice"):
        return ""
    api.discovered.add("ResourceSlice")
    try:
        published = _published(api, driver=driver, hostname=hostname, index=index, uuid=uuid)
    except BackendError:  # an older ClusterRole without ResourceSlices: drain the node
        return ""
    return taint_rules_version(api, groups) if published else ""


def drain_rules(api: Api) -> list[dict]:
    """gpuquota's drain DeviceTaintRules (in the version `taint_rules_version` chose)."""
    return api.list(api.kind("DeviceTaintRule"), f"{DRAIN_LABEL}=gpu-failure")


def _rule(api: Api, name: str) -> dict | None:
    return next((r for r in drain_rules(api) if r["metadata"]["name"] == name), None)


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
