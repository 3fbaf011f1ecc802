"""Draining a Kubernetes node for a GPU failure (docs/reliability.md#drains): cordon it
(`spec.unschedulable`) and taint it `gpuquota.io/gpu-failure=<reason>:NoSchedule`, read
back; resuming removes gpuquota's taint, and uncordons only a node gpuquota cordoned (the
annotation `gpuquota.io/cordoned` says so): a site's own cordon stays. Where DRA lets one
GPU be named, device_drain.py drains that GPU alone instead."""

import re

from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.kubernetes.api import Api

TAINT_KEY = "gpuquota.io/gpu-failure"
CORDONED = "gpuquota.io/cordoned"


def label_value(reason: str) -> str:
    """The reason as a label value (`xid 79` -> `xid-79`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", reason).strip("-_.")[:63] or "failure"


def _node(api: Api, hostname: str) -> dict:
    node = api.node_find(hostname)
    if node is None:
        raise BackendError(f"The cluster has no node {hostname}.")
    return node


def _ours(node: dict) -> bool:
    return any(t.get("key") == TAINT_KEY for t in node.get("spec", {}).get("taints") or [])


def node_cordoned(api: Api, hostname: str) -> bool:
    """Whether gpuquota's drain taint is on the node."""
    return _ours(_node(api, hostname))


def node_drain(api: Api, hostname: str, reason: str) -> None:
    node = _node(api, hostname)
    spec = node.get("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": label_value(reason), "effect": "NoSchedule"})
    patch = {"spec": {"unschedulable": True, "taints": taints}}
    if not spec.get("unschedulable"):
        patch["metadata"] = {"annotations": {CORDONED: "true"}}
    api.node_patch(hostname, patch)
    after = _node(api, hostname)
    if not (after.get("spec", {}).get("unschedulable") and _ours(after)):
        raise BackendError(f"The API accepted the cordon of {hostname} but it does not show.")


def node_resume(api: Api, hostname: str) -> bool:
    node = _node(api, hostname)
    if not _ours(node):
        return False
    taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != TAINT_KEY]
    patch: dict = {"spec": {"taints": taints or None}}
    if (node["metadata"].get("annotations") or {}).get(CORDONED) == "true":
        patch["spec"]["unschedulable"] = None
        patch["metadata"] = {"annotations": {CORDONED: None}}
    api.node_patch(hostname, patch)
    if _ours(_node(api, hostname)):
        raise BackendError(f"The API accepted the resume of {hostname} but the taint stays.")
    return True
