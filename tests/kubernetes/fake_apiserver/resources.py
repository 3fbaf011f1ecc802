"""The kinds the fake API server serves, in the API versions the Kubernetes and Kueue releases
it claims serve, and how it validates and converts what is written to them.

Kubernetes: a kind is served in a version when kubernetes-validate ships that release's
schema for it (the release's own OpenAPI); alpha versions only where `runtime_config` turns
them on, as `--runtime-config=<group>/<version>=true` does, and not those it turns off
(`<group>/<version>=false`, e.g. a 1.33 cluster serving DRA's v1beta1 only). Kueue:
`kueue_api` (the release's served and storage versions and its conversions, from Kueue's
conversion code)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import kubernetes_validate

from gpuquota.schedulers.kubernetes.api import KINDS
from tests.kubernetes.fake_apiserver.kueue_api import KueueApi
from tests.kubernetes.fake_apiserver.kueue_schemas import kueue_errors

KUEUE_IMAGE = "registry.k8s.io/kueue/kueue:v0.14.1"
ALWAYS_SERVED = ("", "apps", "batch")  # core, apps and batch: every cluster has them
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
_PREFERENCE = ("v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1")


@dataclass(frozen=True)
class Resource:
    """A kind as the fake serves it: every version served, the one it stores."""

    group: str
    plural: str
    kind: str
    namespaced: bool
    versions: tuple[str, ...]

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version


#: The product's kind table (gpuquota.schedulers.kubernetes.api.KINDS), which the backend's
#: client uses, and the kinds the fake also serves for tests to play the cluster.
KIND_TABLE = [(k.group, k.plural, k.kind, k.namespaced) for k in KINDS.values()] + [
    ("", "pods", "Pod", True),
    ("batch", "jobs", "Job", True),
    ("", "nodes", "Node", False),
    ("", "namespaces", "Namespace", False),
]


def minor(version: str) -> str:
    """`v1.34.2` -> `1.34`."""
    found = re.match(r"v?(\d+\.\d+)", version)
    if not found:
        raise ValueError(f"not a Kubernetes version: {version}")
    return found.group(1)


@cache
def kubernetes_versions(release: str, group: str, kind: str) -> tuple[str, ...]:
    """The versions of `group` that have `kind` in Kubernetes `release` (alpha included),
    newest first, read from the schemas kubernetes-validate ships for that release."""
    folder = SCHEMAS / f"v{minor(release)}.0-local-strict"
    if not folder.is_dir():
        raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {release}")
    suffix = f"-{group.split('.')[0]}" if group else ""
    found = []
    for version in _PREFERENCE:
        if (folder / f"{kind.lower()}{suffix}-{version}.json").is_file():
            found.append(version)
    return tuple(found)


def served_resources(*, release: str, kueue: KueueApi | None, groups: set[str] | None,
                     runtime_config: frozenset[str]) -> list[Resource]:
    """Every kind this cluster serves, with the versions it serves them in."""
    resources = []
    for group, plural, kind, namespaced in KIND_TABLE:
        if groups is not None and group not in groups and group not in ALWAYS_SERVED:
            continue
        if group == "kueue.x-k8s.io":
            if kueue is None:
                continue
            versions = kueue.versions
        else:
            versions = tuple(v for v in kubernetes_versions(release, group, kind)
                             if ("alpha" not in v or f"{group}/{v}" in runtime_config)
                             and f"{group}/{v}=false" not in runtime_config)
        if versions:
            resources.append(Resource(group, plural, kind, namespaced, versions))
    return resources


def validation_errors(resource: Resource, version: str, obj: dict, *, release: str,
                      kueue: KueueApi | None) -> list[str]:
    """Why the API server would refuse `obj` written as `version` with a 422 (empty: it is
    accepted)."""
    if obj.get("kind") != resource.kind or obj.get("apiVersion") != resource.api_version(version):
        return [f"kind: expected {resource.api_version(version)} {resource.kind}"]
    if resource.group == "kueue.x-k8s.io":
        return kueue_errors(obj, release=kueue.release if kueue else None)
    try:
        kubernetes_validate.validate(obj, f"{minor(release)}.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path) or '(root)'}: {exc.message}"]
    return []


def kueue_controller(*, image: str = KUEUE_IMAGE, labels: dict | None = None,
                     namespace: str = "kueue-system",
                     name: str = "kueue-controller-manager") -> dict:
    """Kueue's controller Deployment as Kueue's manifests install it (the `manager`
    container), for the backend to read Kueue's release from."""
    selector = {"control-plane": "controller-manager"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "kueue", **(labels or {})}},
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector}, "spec": {"containers": [
                         {"name": "manager", "image": image,
                          "args": ["--config=/controller_manager_config.yaml"]}]}}}}
