"""The DRA objects gpuquota reads, in whichever version the cluster serves (docs/kubernetes.md#
dra-api-versions): resource.k8s.io/v1 from Kubernetes 1.34, v1beta2 from 1.33, v1beta1 from
1.32. A ResourceSlice's device differs between them: v1beta1 nests its attributes, capacity
and taints under `basic`; v1beta2 and v1 hold them on the device itself. A ResourceClaim's
allocation (`status.allocation.devices.results[]`: driver, pool, device) and its
`reservedFor` are alike in all three."""

from __future__ import annotations

from dataclasses import dataclass

from gpuquota.schedulers.kubernetes.api import KINDS, Api, Kind

#: The kinds read here, served in `Kind.older` where `Kind.version` is not.
DRA_KINDS = ("ResourceSlice", "ResourceClaim")


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: dict
    taints: tuple[dict, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


def served_version(api: Api, groups: dict, name: str) -> str:
    """The newest version in which the cluster serves kind `name` ("" for none); the Api
    talks to it in that version from now on. Found by discovery, which needs no RBAC rule:
    the group's versions, and for a kind a feature gate may leave out of a served version
    (DeviceTaintRules) that version's resources too; every version of resource.k8s.io read
    for `DRA_KINDS` serves them."""
    kind = KINDS[name]
    for version in (kind.version, *kind.older):
        if version in groups.get(kind.group, []) and (name in DRA_KINDS or kind.plural in (
                api.resources(kind.group, version))):
            api.use(kind.kind, version)
            return version
    return ""


def dra_kind(api: Api, name: str) -> Kind:
    """Kind `name` in the version the cluster serves (discovered once per Api)."""
    if name not in api.discovered:
        served_version(api, api.groups(), name)
        api.discovered.add(name)
    return api.kind(name)


def slice_devices(resource_slice: dict) -> list[Device]:
    """The devices of a ResourceSlice of any served version (v1beta1's `basic` flattened)."""
    spec = resource_slice.get("spec") or {}
    driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
    found = []
    for device in spec.get("devices") or []:
        shape = device.get("basic") if "basic" in device else device
        shape = shape or {}
        found.append(Device(driver, pool, device.get("name", ""),
                            shape.get("attributes") or {}, tuple(shape.get("taints") or ())))
    return found


def claim_devices(claim: dict) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of each device allocated to the claim."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return {(r.get("driver"), r.get("pool"), r.get("device")) for r in results}


def claim_pods(claim: dict) -> set[tuple[str, str]]:
    """(namespace, name) of the pods the claim is reserved for."""
    namespace = claim["metadata"].get("namespace", "")
    return {(namespace, u.get("name")) for u in (claim.get("status") or {}).get(
        "reservedFor") or [] if u.get("resource") == "pods"}
