"""Kueue's release (kubernetes.md#capabilities): read from its controller's Deployment, the
manager container's image tag (`registry.k8s.io/kueue/kueue:v0.14.1`) or else the
`app.kubernetes.io/version` label; and what of gpuquota's plan that release lacks, each
fact taken from Kueue's release notes (the table in kubernetes.md#kueue-releases)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.kubernetes.options import KubernetesOptions

MANAGER_CONTAINER = "manager"
VERSION_LABEL = "app.kubernetes.io/version"
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Release:
    """`version` as Kueue tags it (`v0.14.1`), or "" with `unknown_why`; `source` says
    where it was read."""

    version: str = ""
    source: str = ""
    unknown_why: str = ""

    @property
    def minor(self) -> tuple[int, int] | None:
        found = _RELEASE.match(self.version)
        return (int(found.group(1)), int(found.group(2))) if found else None


def image_tag(image: str) -> str:
    """The tag of an image reference ("" for none): a digest (`@sha256:...`) is not a tag,
    and a registry's port (`registry:5000/kueue`) is not one either."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.partition(":")[2]


def release_from_deployment(deployment: dict, *, where: str) -> Release:
    """The release from the manager container's image tag, else the version label."""
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get(
        "containers", [])
    manager = next((c for c in containers if c.get("name") == MANAGER_CONTAINER),
                   containers[0] if len(containers) == 1 else None)
    why = []
    if manager is None:
        why.append(f"{where} has no container named {MANAGER_CONTAINER}")
    else:
        image = manager.get("image", "")
        tag = image_tag(image)
        if _RELEASE.match(tag):
            return Release(_with_v(tag), f"image tag of {where} ({image})")
        why.append(f"its image {image} has no release tag" if not tag else
                   f"its image tag {tag!r} is not a release ({image})")
    label = (deployment.get("metadata", {}).get("labels") or {}).get(VERSION_LABEL, "")
    if _RELEASE.match(label):
        return Release(_with_v(label), f"label {VERSION_LABEL} of {where}")
    why.append(f"no {VERSION_LABEL} label" if not label else
               f"its {VERSION_LABEL} label {label!r} is not a release")
    return Release(unknown_why=f"{where}: " + "; ".join(why))


def _with_v(version: str) -> str:
    return version if version.startswith("v") else f"v{version}"


def kueue_release(api: Api, *, options: KubernetesOptions) -> Release:
    """Kueue's release on the cluster; not found or not allowed is an unknown release (a
    capability note), never a failed reconcile."""
    where = f"Deployment {options.kueue_namespace}/{options.kueue_deployment}"
    try:
        deployment = api.get(KINDS["Deployment"], options.kueue_deployment,
                             options.kueue_namespace)
    except BackendError as exc:
        return Release(unknown_why=exc.message)
    if deployment is None:
        return Release(unknown_why=(
            f"there is no {where} (set the options kueue_namespace and kueue_deployment to "
            "where Kueue's controller runs)"))
    return release_from_deployment(deployment, where=where)


@dataclass(frozen=True)
class Requirement:
    """Something gpuquota's plan uses and the Kueue release that brought it. `stored`: a
    field the plan writes, which an older Kueue's API drops (it cannot hold the plan)."""

    since: tuple[int, int]
    note: str
    stored: bool


REQUIREMENTS = (
    Requirement((0, 5), "ClusterQueue flavorFungibility and ResourceFlavor tolerations need "
                        "Kueue >= 0.5", stored=True),
    Requirement((0, 6), "ClusterQueue lendingLimit, preemption.borrowWithinCohort and "
                        "stopPolicy need Kueue >= 0.6", stored=True),
    Requirement((0, 8), "LocalQueue stopPolicy needs Kueue >= 0.8", stored=True),
    Requirement((0, 7), "resources.excludeResourcePrefixes in Kueue's configuration needs "
                        "Kueue >= 0.7: before it, Kueue counts the CPU and memory of every "
                        "workload against gpuquota's queues, which cover GPUs only, so GPU "
                        "workloads that request CPU or memory are not admitted", stored=False),
    Requirement((0, 8), "loan returns need Kueue >= 0.8 (the Preempted condition's reasons "
                        "InCohortReclamation and InCohortReclaimWhileBorrowing): before it, "
                        "no time-to-return is recorded", stored=False),
    Requirement((0, 9), "lendingLimit needs Kueue >= 0.9 (the LendingLimit feature gate is "
                        "on by default from 0.9; in 0.6 to 0.8 only with "
                        "--feature-gates=LendingLimit=true): without it any idle GPU of a "
                        "team's quota can be borrowed, on loan or not (the owner still "
                        "reclaims it by preemption)", stored=False),
)


def release_notes(release: Release) -> tuple[list[str], bool]:
    """The notes for what `release` lacks of gpuquota's plan (each citing the release that
    brought it), and whether its API can hold what the plan writes (False: advisory)."""
    if release.minor is None:
        why = release.unknown_why.rstrip(".")
        return [f"The Kueue release is unknown ({why}): gpuquota cannot check that Kueue holds "
                "what it writes (it needs Kueue >= 0.8, and >= 0.9 for lendingLimit)."], True
    notes, holds = [], True
    for requirement in REQUIREMENTS:
        if release.minor < requirement.since:
            notes.append(f"{requirement.note}; this cluster runs Kueue {release.version}.")
            holds = holds and not requirement.stored
    if not holds:
        notes.insert(0, f"Kueue {release.version} cannot hold the queues gpuquota writes (it "
                        "needs Kueue >= 0.8): reservations are advisory; nothing is written "
                        "to the cluster.")
    if release.minor >= (0, 15):
        stored = ("stores as v1beta2 (since 0.16)" if release.minor >= (0, 16) else
                  "stores as v1beta1 until 0.16")
        notes.append(f"Kueue {release.version} serves kueue.x-k8s.io/v1beta2 (since 0.15); "
                     f"gpuquota writes v1beta1, which this release {stored}, in its words "
                     "(flavorFungibility MayStopSearch, not the deprecated Borrow), and compares "
                     "what it reads back as Kueue keeps it.")
    return notes, holds
