"""What Kubernetes' controllers do with DRA claims, played by the fake API server on its own
objects, so the backend's reads see a cluster that moves:

- `allocate`: the scheduler's allocator, for a test's claim: devices of the ResourceSlices
  that match the claim's CEL selectors (evaluated with cel-python over the device's
  attributes), are not allocated to another claim, and whose taints (DeviceTaintRules) the
  claim tolerates;
- `taints_evict`: the device taint eviction controller, on each DeviceTaintRule written: a
  pod whose claim holds a device with its NoExecute taint, not tolerated, gets the condition
  DisruptionTarget (reason DeletionByDeviceTaintManager) and its deletionTimestamp;
- `settle`: the kubelet and the resource claim controller: such a pod is gone once its
  grace period has passed, and its claims' allocations are released;
- `slice_as`: the API server's conversion of a ResourceSlice between its versions (v1beta1
  nests a device's attributes, capacity and taints under `basic`; v1beta2 and v1 do not).

The clock is `datetime.now(UTC)`, which tests move with time_machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import celpy

GROUP = ("resource.k8s.io", "resourceclaims")
PODS = ("", "pods")


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _taints(server) -> list[tuple[dict, dict]]:
    """(device selector, taint) of every DeviceTaintRule."""
    rules = server.objects.get(("resource.k8s.io", "devicetaintrules"), {}).values()
    return [(r["spec"].get("deviceSelector") or {}, r["spec"]["taint"]) for r in rules]


def _matches(selector: dict, driver: str, pool: str, device: str) -> bool:
    return all(selector.get(k) in (None, v) for k, v in
               (("driver", driver), ("pool", pool), ("device", device)))


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    return any(t.get("key") == taint["key"] and t.get("effect") in (None, taint["effect"])
               and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
               for t in tolerations)


def _untolerated(server, tolerations, driver, pool, device, effects) -> bool:
    return any(taint["effect"] in effects and _matches(selector, driver, pool, device)
               and not _tolerates(tolerations, taint) for selector, taint in _taints(server))


def _request(claim: dict) -> dict:
    return claim["spec"]["devices"]["requests"][0]["exactly"]


def _held(server) -> set[tuple[str, str, str]]:
    found = set()
    for claim in server.objects.get(GROUP, {}).values():
        for r in ((claim.get("status") or {}).get("allocation") or {}).get(
                "devices", {}).get("results", []):
            found.add((r["driver"], r["pool"], r["device"]))
    return found


def _selected(request: dict, driver: str, device: dict) -> bool:
    env = celpy.Environment()
    flat = slice_as({"spec": {"devices": [device]}}, "v1")["spec"]["devices"][0]
    attributes = {k: next(iter(v.values())) for k, v in flat.get("attributes", {}).items()}
    activation = {"device": celpy.json_to_cel({"driver": driver,
                                                "attributes": {driver: attributes}})}
    return all(bool(env.program(env.compile(s["cel"]["expression"])).evaluate(activation))
               for s in request.get("selectors", []))


def allocate(server, namespace: str, name: str, *, pod: str) -> bool:
    """Allocate claim `namespace/name` as the scheduler would for `pod` (which it reserves
    the claim for); False when no set of devices fits."""
    with server.lock:
        claim = server.objects[GROUP][(namespace, name)]
        request = _request(claim)
        held, chosen = _held(server), []
        slices = server.objects.get(("resource.k8s.io", "resourceslices"), {}).values()
        for resource_slice in sorted(slices, key=lambda s: s["metadata"]["name"]):
            spec = resource_slice["spec"]
            driver, pool = spec["driver"], spec["pool"]["name"]
            for device in spec.get("devices", []):
                key = (driver, pool, device["name"])
                if (key in held or not _selected(request, driver, device)
                        or _untolerated(server, request.get("tolerations", []), *key,
                                        effects=("NoSchedule", "NoExecute"))):
                    continue
                chosen.append(key)
        if len(chosen) < request.get("count", 1):
            return False
        claim["status"] = {
            "allocation": {"devices": {"results": [
                {"request": "gpus", "driver": d, "pool": p, "device": n}
                for d, p, n in chosen[:request.get("count", 1)]]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]}
        return True


def taints_evict(server, rule: dict) -> None:
    """Mark for eviction every pod whose claim holds a device with the NoExecute taint of
    `rule` (a DeviceTaintRule just written) that the claim does not tolerate. The other rules
    were applied when they were written: a rule's write costs one pass over the claims, not
    one per rule (a fleet's bench writes thousands)."""
    now = datetime.now(UTC)
    pods = server.objects.get(PODS, {})
    selector, taint = rule["spec"].get("deviceSelector") or {}, rule["spec"]["taint"]
    if taint["effect"] != "NoExecute":
        return
    for (namespace, _), claim in server.objects.get(GROUP, {}).items():
        results = ((claim.get("status") or {}).get("allocation") or {}).get(
            "devices", {}).get("results", [])
        tolerations = _request(claim).get("tolerations", [])
        if _tolerates(tolerations, taint) or not any(
                _matches(selector, r["driver"], r["pool"], r["device"]) for r in results):
            continue
        for user in claim["status"].get("reservedFor", []):
            pod = pods.get((namespace, user["name"]))
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            pod["metadata"]["deletionTimestamp"] = _stamp(now)
            pod.setdefault("status", {}).setdefault("conditions", []).append({
                "type": "DisruptionTarget", "status": "True",
                "reason": "DeletionByDeviceTaintManager",
                "message": "Device Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": _stamp(now)})


def settle(server) -> None:
    """Pods marked for deletion whose grace period has passed are gone, and the claims they
    held are released."""
    now = datetime.now(UTC)
    pods = server.objects.get(PODS, {})
    for key, pod in list(pods.items()):
        since = pod["metadata"].get("deletionTimestamp")
        grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        if since and datetime.fromisoformat(since.replace("Z", "+00:00")) + timedelta(
                seconds=grace) <= now:
            del pods[key]
            for (namespace, _), claim in server.objects.get(GROUP, {}).items():
                users = (claim.get("status") or {}).get("reservedFor", [])
                if namespace == key[0] and any(u["name"] == key[1] for u in users):
                    claim["status"] = {}


#: A device's fields that v1beta1 nests under `basic` (its BasicDevice).
_BASIC = ("attributes", "capacity", "taints", "consumesCounters", "nodeName", "nodeSelector",
          "allNodes", "bindsToNode", "bindingConditions", "bindingFailureConditions",
          "allowMultipleAllocations")


def slice_as(obj: dict, version: str) -> dict:
    """The ResourceSlice `obj` (of any version's shape) in `version`'s shape."""
    devices = (obj.get("spec") or {}).get("devices")
    if not devices:
        return obj
    converted = []
    for device in devices:
        flat = {k: v for k, v in device.items() if k != "basic"}
        flat.update(device.get("basic") or {})
        if version == "v1beta1":
            basic = {k: flat.pop(k) for k in _BASIC if k in flat}
            flat["basic"] = basic
        converted.append(flat)
    return {**obj, "spec": {**obj["spec"], "devices": converted}}
