"""How far a cluster's drains got (docs/reliability.md#drains), as Slurm's DRAINING and
DRAINED, read in one pass per cluster: the cluster's pods, nodes, gpuquota's drain rules and
ResourceClaims are each listed once, however many GPUs and nodes drain (each index by device
or node), so a drain pass costs the same few API calls for one draining GPU or a thousand.

A GPU drained alone is draining while a running pod that a ResourceClaim holding it is
reserved for still runs; a cordoned node while a pod other than a DaemonSet's or a static
(mirror) pod still runs on it, as `kubectl drain` counts them. "" where gpuquota's rule or
taint is not there (someone removed it)."""

from __future__ import annotations

from collections import defaultdict

from gpuquota.schedulers.kubernetes.api import Api
from gpuquota.schedulers.kubernetes.capabilities import taint_rules_version
from gpuquota.schedulers.kubernetes.device_drain import drain_rules, rule_name
from gpuquota.schedulers.kubernetes.drain import TAINT_KEY
from gpuquota.schedulers.kubernetes.slices import claim_devices, claim_pods, dra_kind

_FINISHED = ("Succeeded", "Failed")


def _running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in _FINISHED


def _counted(pod: dict) -> bool:
    """A pod that a drain waits for: not a DaemonSet's, not a static pod's mirror."""
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def _running_pods(api: Api) -> list[dict]:
    return [p for p in api.pods_list() if _running(p)]


def _gpus(api: Api, driver: str, gpus: list[tuple[str, int]],
          pods: list[dict]) -> dict[tuple, str]:
    if not taint_rules_version(api, api.groups()):
        return {}
    ours = {r["metadata"]["name"] for r in drain_rules(api)}
    users: dict[tuple[str, str, str], set] = defaultdict(set)
    for claim in api.list(dra_kind(api, "ResourceClaim"), selector=""):
        for device in claim_devices(claim):
            users[device] |= claim_pods(claim)
    running = {(p["metadata"].get("namespace"), p["metadata"]["name"]) for p in pods}
    return {("gpu", hostname, index): (
        "" if rule_name(hostname, index) not in ours else
        "draining" if users.get((driver, hostname, f"gpu-{index}"), set()) & running
        else "drained") for hostname, index in gpus}


def _nodes(api: Api, hostnames: list[str], pods: list[dict]) -> dict[tuple, str]:
    tainted = {n["metadata"]["name"] for n in api.nodes_list()
               if any(t.get("key") == TAINT_KEY for t in n.get("spec", {}).get("taints") or [])}
    busy = {p.get("spec", {}).get("nodeName") for p in pods if _counted(p)}
    return {("node", h): "" if h not in tainted else "draining" if h in busy else "drained"
            for h in hostnames}


def drains_progress(api: Api, *, driver: str, nodes: list[str],
                    gpus: list[tuple[str, int]]) -> dict[tuple, str]:
    """("node", hostname) and ("gpu", hostname, index) -> "draining", "drained" or ""."""
    if not nodes and not gpus:
        return {}
    pods = _running_pods(api)
    found = _gpus(api, driver, gpus, pods) if gpus else {}
    if nodes:
        found.update(_nodes(api, nodes, pods))
    return found
