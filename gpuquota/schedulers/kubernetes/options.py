"""A Kubernetes cluster's backend options (`BackendConfig.options`, kubernetes.md#options)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuquota.core.errors import DomainError
from gpuquota.core.names import dns1123_label_error, label_value_error

DEFAULT_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
#: Who creates the objects of a judged parent, as the API server names the caller
#: (kubernetes.md#admission): a Job's pods come from kube-controller-manager's job
#: controller (its own ServiceAccount where it runs with --use-service-account-credentials,
#: as kubeadm sets it up), a JobSet's Jobs from the JobSet controller, a RayJob's RayCluster
#: and a RayCluster's pods from the KubeRay operator, a PyTorchJob's pods from Kubeflow's
#: training operator, each as their upstream manifests install them.
DEFAULT_WORKLOAD_CONTROLLERS = {
    "Job": ("system:serviceaccount:kube-system:job-controller",
            "system:kube-controller-manager"),
    "JobSet": ("system:serviceaccount:jobset-system:jobset-controller-manager",),
    "RayJob": ("system:serviceaccount:ray-system:kuberay-operator",),
    "RayCluster": ("system:serviceaccount:ray-system:kuberay-operator",),
    "PyTorchJob": ("system:serviceaccount:kubeflow:training-operator",),
}
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._@-]{0,252}$")


@dataclass(frozen=True)
class KubernetesOptions:
    cohort: str
    resource_name: str = "nvidia.com/gpu"
    lead_time_s: int = 900
    flavors: dict = field(default_factory=dict)  # GPU class -> node_labels, tolerations
    borrowing_limit: int | None = None
    exact_gpus: bool = False
    dra_device_class: str = "gpu.nvidia.com"
    dra_driver: str = "gpu.nvidia.com"
    ca_file: str = ""  # the API server's CA certificate, when it is private
    kueue_namespace: str = "kueue-system"  # where Kueue's controller runs (its release)
    kueue_deployment: str = "kueue-controller-manager"
    #: Parent kind -> the user names its controller creates objects as (admission).
    workload_controllers: dict = field(
        default_factory=lambda: dict(DEFAULT_WORKLOAD_CONTROLLERS))

    def node_labels(self, gpu_class: str, slug: str) -> dict:
        return dict(self.flavors.get(gpu_class, {}).get("node_labels")
                    or {"gpuquota.io/gpu-class": slug})

    def tolerations(self, gpu_class: str) -> list[dict]:
        found = self.flavors.get(gpu_class, {}).get("tolerations")
        return [dict(t) for t in (found if found is not None else DEFAULT_TOLERATIONS)]


def options_parse(raw: dict | None, *, cluster_slug: str) -> KubernetesOptions:
    """The options from their stored JSON, refused with the field named when unusable."""
    raw = dict(raw or {})
    known = {"cohort", "resource_name", "lead_time_s", "flavors", "borrowing_limit",
             "exact_gpus", "dra_device_class", "dra_driver", "ca_file", "kueue_namespace",
             "kueue_deployment", "workload_controllers"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DomainError(f"Unknown Kubernetes option(s): {', '.join(unknown)}.",
                          field="options")
    lead = raw.get("lead_time_s", 900)
    if not isinstance(lead, int) or isinstance(lead, bool) or not 0 <= lead <= 86400:
        raise DomainError("lead_time_s is a whole number of seconds, 0 to 86400.",
                          field="options")
    limit = raw.get("borrowing_limit")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise DomainError("borrowing_limit is a number of GPUs, 0 or more.", field="options")
    if not isinstance(raw.get("flavors", {}), dict):
        raise DomainError("flavors maps a GPU class to node_labels and tolerations.",
                          field="options")
    for name in ("kueue_namespace", "kueue_deployment"):
        value = raw.get(name)
        error = value is not None and dns1123_label_error(value, what=name)
        if error:
            raise DomainError(error, field="options")
    controllers = _workload_controllers(raw.get("workload_controllers") or {})
    cohort = str(raw.get("cohort") or f"gq-{cluster_slug}")
    refused = dns1123_label_error(cohort, what="The cohort") or next(filter(None, (
        label_value_error(v, what=f"The node label {k} of {c}")
        for c, f in raw.get("flavors", {}).items() if isinstance(f, dict)
        for k, v in (f.get("node_labels") or {}).items())), None)
    if refused:
        raise DomainError(refused, field="options")
    return KubernetesOptions(
        cohort=cohort,
        resource_name=str(raw.get("resource_name") or "nvidia.com/gpu"),
        lead_time_s=lead, flavors=raw.get("flavors", {}), borrowing_limit=limit,
        exact_gpus=bool(raw.get("exact_gpus", False)),
        dra_device_class=str(raw.get("dra_device_class") or "gpu.nvidia.com"),
        dra_driver=str(raw.get("dra_driver") or "gpu.nvidia.com"),
        ca_file=str(raw.get("ca_file") or ""),
        kueue_namespace=raw.get("kueue_namespace") or "kueue-system",
        kueue_deployment=raw.get("kueue_deployment") or "kueue-controller-manager",
        workload_controllers=controllers)


def _workload_controllers(raw) -> dict[str, tuple[str, ...]]:
    """The defaults, with the kinds `raw` names replaced by its user names."""
    if not isinstance(raw, dict) or any(k not in DEFAULT_WORKLOAD_CONTROLLERS for k in raw):
        raise DomainError("workload_controllers maps a kind ("
                          + ", ".join(DEFAULT_WORKLOAD_CONTROLLERS) + ") to the user names "
                          "its controller acts as.", field="options")
    found = dict(DEFAULT_WORKLOAD_CONTROLLERS)
    for kind, names in raw.items():
        if not isinstance(names, list) or not all(
                isinstance(n, str) and _USER_NAME.match(n) for n in names):
            raise DomainError(f"workload_controllers.{kind} is a list of user names such as "
                              "system:serviceaccount:<namespace>:<name>.", field="options")
        found[kind] = tuple(names)
    return found
