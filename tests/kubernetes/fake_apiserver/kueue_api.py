"""Kueue's API as a given release serves it: the versions (kueue.x-k8s.io/v1beta1 from 0.3,
v1beta2 served from 0.15 and stored from 0.16), and the conversions between them from
Kueue's own conversion code (apis/kueue/v1beta1/*_conversion.go and their tests):

- ClusterQueue v1beta1 -> v1beta2: `cohort` becomes `cohortName`, `admissionChecks` become
  `admissionChecksStrategy`, and flavorFungibility's deprecated `Borrow` and `Preempt`
  become `MayStopSearch`; back to v1beta1 `cohortName` becomes `cohort` again and
  `MayStopSearch` stays (the test "FlavorFungibility MayStopSearch preserved").
- LocalQueue and ResourceFlavor: the spec is the same in both versions.

So a ClusterQueue written through v1beta1 with `whenCanBorrow: Borrow` reads back, through
either version, with `MayStopSearch` on Kueue 0.16 and later."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

GROUP = "kueue.x-k8s.io"
_RENAMED = {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}


def release_minor(release: str) -> tuple[int, int]:
    found = re.match(r"v?(\d+)\.(\d+)", release)
    if not found:
        raise ValueError(f"not a Kueue release: {release}")
    return int(found.group(1)), int(found.group(2))


@dataclass(frozen=True)
class KueueApi:
    release: str  # e.g. "v0.16.2"

    @property
    def minor(self) -> tuple[int, int]:
        return release_minor(self.release)

    @property
    def storage_version(self) -> str:
        return "v1beta2" if self.minor >= (0, 16) else "v1beta1"

    @property
    def versions(self) -> tuple[str, ...]:
        """Served versions, the storage version first."""
        served = ["v1beta1"] + (["v1beta2"] if self.minor >= (0, 15) else [])
        return (self.storage_version, *[v for v in served if v != self.storage_version])

    def to_storage(self, obj: dict) -> dict:
        """`obj` as received (any served version) -> as stored."""
        version = obj["apiVersion"].rsplit("/", 1)[1]
        if version == self.storage_version:
            return copy.deepcopy(obj)
        return _convert(obj, self.storage_version)

    def present(self, obj: dict, version: str) -> dict:
        """A stored object as served through `version`."""
        if obj["apiVersion"] == f"{GROUP}/{version}":
            return copy.deepcopy(obj)
        return _convert(obj, version)


def _convert(obj: dict, version: str) -> dict:
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{GROUP}/{version}"
    if obj.get("kind") != "ClusterQueue":
        return out
    spec = out.get("spec", {})
    if version == "v1beta2":
        if "cohort" in spec:
            spec["cohortName"] = spec.pop("cohort")
        if "admissionChecks" in spec:
            checks = spec.pop("admissionChecks")
            if checks:
                spec["admissionChecksStrategy"] = {
                    "admissionChecks": [{"name": name} for name in checks]}
        fungibility = spec.get("flavorFungibility") or {}
        for field in ("whenCanBorrow", "whenCanPreempt"):
            if field in fungibility:
                fungibility[field] = _RENAMED.get(fungibility[field], fungibility[field])
    elif "cohortName" in spec:
        spec["cohort"] = spec.pop("cohortName")
    return out
