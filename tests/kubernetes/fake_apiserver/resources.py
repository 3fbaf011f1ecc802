"""The kinds the fake API server serves, and how it validates what is written to them."""

from __future__ import annotations

from dataclasses import dataclass

import kubernetes_validate

from gpuquota.schedulers.kubernetes.api import KINDS
from tests.kubernetes.fake_apiserver.kueue_schemas import kueue_errors

KUBERNETES_SCHEMA_VERSION = "1.37.0"
KUEUE_IMAGE = "registry.k8s.io/kueue/kueue:v0.14.1"
ALWAYS_SERVED = ("", "apps")  # core and apps: every cluster has them


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


#: The product's kind table (gpuquota.schedulers.kubernetes.api.KINDS), which the backend's
#: client uses, and the core kinds the fake also serves for tests to play the cluster.
RESOURCES = [Resource(k.group, k.version, k.plural, k.kind, k.namespaced)
             for k in KINDS.values()] + [
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "namespaces", "Namespace", False),
]


def validation_errors(resource: Resource, obj: dict) -> list[str]:
    """Why the API server would refuse `obj` with a 422 (empty: it is accepted)."""
    if obj.get("kind") != resource.kind or obj.get("apiVersion") != resource.api_version:
        return [f"kind: expected {resource.api_version} {resource.kind}"]
    if resource.group == "kueue.x-k8s.io":
        return kueue_errors(obj)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_SCHEMA_VERSION, strict=True)
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
