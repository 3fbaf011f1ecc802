"""Admission rules as ValidatingAdmissionPolicies (CEL, no webhook server), rendered from the
cluster's teams and namespaces: a GPU workload runs only in a team's namespace, in that
team's queue, and no container reaches GPUs through NVIDIA_VISIBLE_DEVICES without asking for
them. One policy per workload kind, so each expression reads one kind's fields."""

from __future__ import annotations

from dataclasses import dataclass

from gpuquota.schedulers.backend import owned_name
from gpuquota.schedulers.kubernetes.objects import labels
from gpuquota.schedulers.kubernetes.options import KubernetesOptions

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Namespaces whose pods legitimately see every GPU without requesting one (the NVIDIA
#: operator's device plugin and exporter, gpuquota's own agent) or that run the cluster.
EXEMPT_NAMESPACES = ("gpu-operator", "gpuquota", "kube-system", "nvidia-gpu-operator")


@dataclass(frozen=True)
class WorkloadKind:
    name: str  # in the policy's name
    api_group: str
    api_version: str
    resource: str
    pod_specs: str  # CEL: the list of pod specs of `object`
    checked_owner: str = ""  # CEL: true when a checked parent owns the object


_OWNED_BY = ("has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists("
             "o, has(o.controller) && o.controller && o.kind in [{kinds}])")
_RAY_SPECS = ("[{p}.headGroupSpec.template.spec] + (has({p}.workerGroupSpecs) ? "
              "{p}.workerGroupSpecs.map(w, w.template.spec) : [])")

KINDS = (
    WorkloadKind("pods", "", "v1", "pods", "[object.spec]",
                 _OWNED_BY.format(kinds="'Job', 'RayCluster'")),
    WorkloadKind("jobs", "batch", "v1", "jobs", "[object.spec.template.spec]",
                 _OWNED_BY.format(kinds="'JobSet', 'CronJob'")),
    WorkloadKind("jobsets", "jobset.x-k8s.io", "v1alpha2", "jobsets",
                 "object.spec.replicatedJobs.map(r, r.template.spec.template.spec)"),
    WorkloadKind("rayjobs", "ray.io", "v1", "rayjobs",
                 "has(object.spec.rayClusterSpec) ? "
                 + _RAY_SPECS.format(p="object.spec.rayClusterSpec") + " : []"),
    WorkloadKind("rayclusters", "ray.io", "v1", "rayclusters",
                 _RAY_SPECS.format(p="object.spec"), _OWNED_BY.format(kinds="'RayJob'")),
)


def _container_requests(resource: str) -> str:
    return (f"(has(c.resources) && ((has(c.resources.limits) && '{resource}' in "
            f"c.resources.limits) || (has(c.resources.requests) && '{resource}' in "
            "c.resources.requests)))")


def _containers(spec: str) -> str:
    return f"{spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : [])"


def _variables(kind: WorkloadKind, team_queues: dict[str, str], resource: str) -> list[dict]:
    queues = "{" + ", ".join(f"'{ns}': '{q}'" for ns, q in sorted(team_queues.items())) + "}"
    wants = (f"variables.podSpecs.exists(s, ({_containers('s')}).exists(c, "
             f"{_container_requests(resource)}) || (has(s.resourceClaims) && "
             "size(s.resourceClaims) > 0))")
    return [
        {"name": "podSpecs", "expression": kind.pod_specs},
        {"name": "checkedByOwner", "expression": kind.checked_owner or "false"},
        {"name": "teamQueues", "expression": queues},
        {"name": "wantsGpu", "expression": f"!variables.checkedByOwner && {wants}"},
        {"name": "queue", "expression": (
            f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels ? "
            f"object.metadata.labels['{QUEUE_LABEL}'] : ''")},
    ]


def _validations(resource: str) -> list[dict]:
    bypass = ("e.name == 'NVIDIA_VISIBLE_DEVICES' && !(has(e.value) && e.value in "
              "['void', 'none']) || e.name == 'CUDA_VISIBLE_DEVICES' && has(e.value) && "
              "e.value == 'all'")
    return [
        {"expression": "!variables.wantsGpu || request.namespace in variables.teamQueues",
         "messageExpression": ("'gpuquota: GPU workloads run only in a team namespace; ' + "
                               "request.namespace + ' belongs to no team'"),
         "reason": "Forbidden"},
        {"expression": ("!variables.wantsGpu || !(request.namespace in variables.teamQueues) "
                        "|| variables.queue == variables.teamQueues[request.namespace]"),
         "messageExpression": (f"'gpuquota: GPU workloads in ' + request.namespace + ' need "
                               f"the label {QUEUE_LABEL}: ' + "
                               "variables.teamQueues[request.namespace] + ' (their team\\'s "
                               "queue)'"),
         "reason": "Forbidden"},
        {"expression": (f"variables.podSpecs.all(s, ({_containers('s')}).all(c, "
                        f"{_container_requests(resource)} || !has(c.env) || "
                        f"!c.env.exists(e, {bypass})))"),
         "message": ("gpuquota: a container sets NVIDIA_VISIBLE_DEVICES (or "
                     "CUDA_VISIBLE_DEVICES=all) without requesting a GPU: request "
                     f"{resource} instead"),
         "reason": "Forbidden"},
    ]


def admission_objects(team_queues: dict[str, str], *, cluster_slug: str,
                      options: KubernetesOptions) -> list[dict]:
    """A policy and its binding per workload kind. `team_queues`: namespace -> the queue
    (LocalQueue name) of the team it belongs to."""
    objects = []
    for kind in KINDS:
        name = owned_name("gpu", kind.name)
        objects.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels(cluster_slug)},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [kind.api_group], "apiVersions": [kind.api_version],
                    "operations": ["CREATE", "UPDATE"], "resources": [kind.resource]}]},
                "variables": _variables(kind, team_queues, options.resource_name),
                "validations": _validations(options.resource_name),
            }})
        objects.append({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels(cluster_slug)},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": {"matchExpressions": [{
                         "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": list(EXEMPT_NAMESPACES)}]}}}})
    return objects
