"""What a Kubernetes cluster can hold (kubernetes.md#capabilities): its version, whether
Kueue's v1beta1 API is served and Kueue's release can hold what gpuquota writes, whether DRA
is GA (resource.k8s.io/v1, Kubernetes >= 1.34: the exact-GPU mode), whether the NVIDIA driver
publishes devices (ResourceSlices in any served version: v1beta1 from 1.32), and
DeviceTaintRules in the version the cluster serves them (or what the DRA mode cannot do):
with a driver and rules, a GPU failure drains that GPU alone (`gpu_drains`), else its node."""

from __future__ import annotations

import re

from gpuquota.schedulers.backend import BackendError, CapabilityReport
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.kubernetes.kueue_release import kueue_release, release_notes
from gpuquota.schedulers.kubernetes.options import KubernetesOptions
from gpuquota.schedulers.kubernetes.slices import served_version
from gpuquota.schedulers.kubernetes.stored import stored_version
from gpuquota.schedulers.models import BindingLevel

KUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue")
ADMISSION_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
DRA_MIN_MINOR = 34
#: DeviceTaintRule: v1alpha3 from 1.33, v1beta2 from 1.36, v1 from 1.37 (kubernetes-validate's
#: schemas of each release).
TAINTS_ALPHA_MINOR, TAINTS_BETA_MINOR, TAINTS_GA_MINOR = 33, 36, 37


def minor_of(version: str) -> int:
    found = re.match(r"v?1\.(\d+)", version)
    return int(found.group(1)) if found else 0


def _kueue(api: Api, groups: dict, options: KubernetesOptions) -> tuple[dict, list[str]]:
    """Kueue's facts and notes: its API versions, its release, and whether gpuquota writes
    to it (`kueue_writable`: v1beta1 served by a release that holds the plan)."""
    versions = groups.get("kueue.x-k8s.io", [])
    facts: dict[str, object] = {"kueue_api": "kueue.x-k8s.io/v1beta1" if "v1beta1" in versions
                                else "", "kueue_versions": versions, "kueue_release": "",
                                "kueue_release_source": "", "kueue_release_unknown": "",
                                "kueue_writable": False, "kueue_storage_version": ""}
    if not versions:
        return facts, ["Kueue is not installed (no kueue.x-k8s.io/v1beta1): reservations are "
                       "advisory; nothing is written to the cluster."]
    release = kueue_release(api, options=options)
    facts.update(kueue_release=release.version, kueue_release_source=release.source,
                 kueue_release_unknown=release.unknown_why)
    if not facts["kueue_api"]:
        return facts, [f"Kueue serves kueue.x-k8s.io {', '.join(versions)} but not v1beta1, "
                       "which gpuquota writes (Kueue 0.3 brought it; Kueue's 0.16 release "
                       "notes plan to stop serving it in 0.18): reservations are advisory; "
                       "nothing is written to the cluster."]
    notes, holds = release_notes(release)
    facts["kueue_writable"] = holds
    facts["kueue_storage_version"] = stored_version(release.minor)
    return facts, notes


def taint_rules_version(api: Api, groups: dict) -> str:
    """The newest version in which the cluster serves DeviceTaintRules ("" for none); the
    Api talks to them in it from now on. Found by discovery, which needs no RBAC rule."""
    return served_version(api, groups, "DeviceTaintRule")


def _no_taints_why(version: str) -> str:
    """Why this release serves no DeviceTaintRules."""
    minor = minor_of(version)
    if minor < TAINTS_ALPHA_MINOR:
        why = f"Kubernetes 1.{minor} has none (they came as alpha in 1.{TAINTS_ALPHA_MINOR})"
    elif minor < TAINTS_BETA_MINOR:
        why = (f"Kubernetes 1.{minor} has them only as resource.k8s.io/v1alpha3, an alpha API "
               "served only with the feature gate DRADeviceTaints and "
               "--runtime-config=resource.k8s.io/v1alpha3=true on the API server")
    elif minor < TAINTS_GA_MINOR:
        why = (f"Kubernetes 1.{minor} has them as resource.k8s.io/v1beta2 (beta), not served "
               "here: turn on the feature gate DRADeviceTaints and "
               "--runtime-config=resource.k8s.io/v1beta2=true")
    else:
        why = (f"Kubernetes 1.{minor} has them as resource.k8s.io/v1, not served here (the "
               "feature gate DRADeviceTaints is off)")
    return why


def _no_taints_note(version: str) -> str:
    """What the exact-GPU mode cannot do without DeviceTaintRules, and why on this release."""
    return (f"DeviceTaintRules are not served: {_no_taints_why(version)}. Each reservation's "
            "claim template still asks for exactly its GPUs, but nothing keeps other teams' "
            "claims off those GPUs (only the admission policies keep them in their own "
            "queues).")


def _dra_driver(api: Api, groups: dict, options: KubernetesOptions) -> bool:
    """Whether the DRA driver publishes devices: a ResourceSlice of `options.dra_driver`, in
    whichever version the cluster serves them (v1beta1 from 1.32), asked for one (the API
    server selects by `spec.driver`: the cluster's other slices are not read)."""
    if not served_version(api, groups, "ResourceSlice"):
        return False
    api.discovered.add("ResourceSlice")
    return bool(api.list(api.kind("ResourceSlice"), selector="",
                         fields=f"spec.driver={options.dra_driver}", limit=1))


def _drains_note(version: str, taints: str) -> str:
    """How a GPU failure is drained here (docs/kubernetes.md#drains), where DRA publishes GPUs."""
    if taints:
        return ("A GPU failure drains that GPU alone: a DeviceTaintRule (resource.k8s.io/"
                f"{taints}) on its DRA device, NoExecute for a critical failure, NoSchedule for "
                "a lesser one; the node's other GPUs stay in service.")
    return ("A GPU failure drains its whole node (cordon and taint): DeviceTaintRules are not "
            f"served ({_no_taints_why(version)}).")


def dra_served(version: str, groups: dict) -> bool:
    """Whether DRA is GA here (resource.k8s.io/v1, Kubernetes >= 1.34)."""
    return "v1" in groups.get("resource.k8s.io", []) and minor_of(version) >= DRA_MIN_MINOR


def detect(api: Api, *, options: KubernetesOptions) -> CapabilityReport:
    version = api.version()
    groups = api.groups()
    facts, notes = _kueue(api, groups, options)
    kueue = bool(facts["kueue_writable"])
    dra_api = dra_served(version, groups)
    served = list(ADMISSION_KINDS) + (list(KUEUE_KINDS) if kueue else [])
    facts.update(kubernetes=version, dra_api=dra_api, exact_gpus_requested=options.exact_gpus)
    best = BindingLevel.QUOTA if kueue else BindingLevel.ADVISORY
    try:
        driver = _dra_driver(api, groups, options)
    except BackendError:
        if options.exact_gpus:
            raise
        # An older ClusterRole without ResourceSlices: drains hold the node, as before.
        driver = False
        notes.append("GPU failures drain whole nodes: the reconciler may not list "
                     f"ResourceSlices (see {KINDS['ResourceSlice'].rbac_file}).")
    taints = taint_rules_version(api, groups) if driver else ""
    facts.update(dra_driver=driver, device_taint_rules=bool(taints),
                 device_taint_rules_version=taints, gpu_drains=bool(taints))
    if taints:
        served.append("DeviceTaintRule")
    if options.exact_gpus:
        if driver and dra_api:
            if not taints:
                notes.append(_no_taints_note(version))
            served.append("ResourceClaimTemplate")
            best = BindingLevel.EXACT_GPUS
            notes.append("Exact GPUs (DRA) is on: Kueue cannot count ResourceClaims against "
                         "quotas yet, so a reservation is held by its claim template and "
                         "device taints, not by Kueue's quota.")
        else:
            notes.append(f"Exact GPUs was asked for, but the cluster has no DRA "
                         f"(Kubernetes >= 1.{DRA_MIN_MINOR}, resource.k8s.io/v1) with the "
                         f"{options.dra_driver} driver publishing devices.")
    if driver:
        notes.append(_drains_note(version, taints))
    facts["served_kinds"] = served
    return CapabilityReport(version=version, best_binding=best, facts=facts, notes=tuple(notes))
