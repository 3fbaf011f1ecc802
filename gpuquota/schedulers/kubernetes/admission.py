"""Admission rules as ValidatingAdmissionPolicies (CEL, no webhook server), rendered from the
cluster's teams and namespaces: a GPU workload runs only in a team's namespace, in that
team's queue, and no container reaches GPUs through NVIDIA_VISIBLE_DEVICES without asking for
them. One policy per workload kind (kubernetes.md#admission has the table), so each
expression reads one kind's fields.

An object made for a parent that was judged already (a Job's pods, a JobSet's Jobs, a
RayJob's RayCluster) is spared only when the API server says its controller made it: the
request's user (`request.userInfo.username`, set by the API server from the caller's
credentials) is that controller's, and its controlling ownerReference names the parent's
kind. An ownerReference alone is text anyone can write."""

from __future__ import annotations

from dataclasses import dataclass

from gpuquota.schedulers.backend import owned_name
from gpuquota.schedulers.kubernetes.objects import labels
from gpuquota.schedulers.kubernetes.options import KubernetesOptions

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Namespaces whose pods legitimately see every GPU without requesting one (the NVIDIA
#: operator's device plugin and exporter, gpuquota's own agent) or that run the cluster.
EXEMPT_NAMESPACES = ("gpu-operator", "gpuquota", "kube-system", "nvidia-gpu-operator")
#: The API group of each parent kind, as its controller writes it in an ownerReference.
PARENT_GROUPS = {"Job": "batch", "JobSet": "jobset.x-k8s.io", "RayJob": "ray.io",
                 "RayCluster": "ray.io", "PyTorchJob": "kubeflow.org"}


@dataclass(frozen=True)
class WorkloadKind:
    name: str  # in the policy's name
    api_group: str
    api_version: str
    resource: str
    pod_specs: str  # CEL, of `{o}` (the object, or the old object): the list of pod specs
    queue_meta: str = "{o}.metadata"  # CEL: the metadata whose labels carry the queue label
    parents: tuple[str, ...] = ()  # kinds whose controller makes it for a judged parent
    where: str = ""  # where the queue label goes, in the refusal's words


_RAY_SPECS = ("[{p}.headGroupSpec.template.spec] + (has({p}.workerGroupSpecs) ? "
              "{p}.workerGroupSpecs.map(w, w.template.spec) : [])")
_PYTORCH = "{o}.spec.pytorchReplicaSpecs"

KINDS = (
    WorkloadKind("pods", "", "v1", "pods", "[{o}.spec]",
                 parents=("Job", "RayCluster", "PyTorchJob")),
    WorkloadKind("jobs", "batch", "v1", "jobs", "[{o}.spec.template.spec]",
                 parents=("JobSet",)),
    WorkloadKind("cronjobs", "batch", "v1", "cronjobs",
                 "[{o}.spec.jobTemplate.spec.template.spec]",
                 queue_meta="{o}.spec.jobTemplate.metadata",
                 where=" on spec.jobTemplate.metadata (its Jobs carry it)"),
    WorkloadKind("deployments", "apps", "v1", "deployments", "[{o}.spec.template.spec]",
                 queue_meta="{o}.spec.template.metadata",
                 where=" on its pod template (where Kueue copies it)"),
    WorkloadKind("statefulsets", "apps", "v1", "statefulsets", "[{o}.spec.template.spec]",
                 queue_meta="{o}.spec.template.metadata",
                 where=" on its pod template (where Kueue copies it)"),
    WorkloadKind("jobsets", "jobset.x-k8s.io", "v1alpha2", "jobsets",
                 "{o}.spec.replicatedJobs.map(r, r.template.spec.template.spec)"),
    WorkloadKind("rayjobs", "ray.io", "v1", "rayjobs",
                 "has({o}.spec.rayClusterSpec) ? "
                 + _RAY_SPECS.replace("{p}", "{o}.spec.rayClusterSpec") + " : []"),
    WorkloadKind("rayclusters", "ray.io", "v1", "rayclusters",
                 _RAY_SPECS.replace("{p}", "{o}.spec"), parents=("RayJob",)),
    WorkloadKind("pytorchjobs", "kubeflow.org", "v1", "pytorchjobs",
                 _PYTORCH + ".map(k, " + _PYTORCH + "[k].template.spec)"),
)


def _cel_list(values) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _made_by_controller(kind: WorkloadKind, controllers: dict[str, tuple[str, ...]]) -> str:
    """CEL: the API server's user is the controller of a parent kind that the object's
    controlling ownerReference names."""
    if not kind.parents:
        return "false"
    terms = " || ".join(
        f"(o.kind == '{parent}' && o.apiVersion.startsWith('{PARENT_GROUPS[parent]}/') && "
        f"request.userInfo.username in {_cel_list(controllers.get(parent, ()))})"
        for parent in kind.parents)
    return ("has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists("
            f"o, has(o.controller) && o.controller && ({terms}))")


def _queue(meta: str) -> str:
    return (f"has({meta}.labels) && '{QUEUE_LABEL}' in {meta}.labels ? "
            f"{meta}.labels['{QUEUE_LABEL}'] : ''")


def _has_meta(meta: str) -> str:
    """`{o}.spec.jobTemplate.metadata` -> a guard that each step exists."""
    parts = meta.split(".")
    return " && ".join(f"has({'.'.join(parts[:i + 1])})" for i in range(1, len(parts)))


def _queue_of(kind: WorkloadKind, o: str) -> str:
    meta = kind.queue_meta.format(o=o)
    return f"({_has_meta(meta)} ? ({_queue(meta)}) : '')"


def _container_requests(resource: str) -> str:
    return (f"(has(c.resources) && ((has(c.resources.limits) && '{resource}' in "
            f"c.resources.limits) || (has(c.resources.requests) && '{resource}' in "
            "c.resources.requests)))")


def _containers(spec: str) -> str:
    return f"{spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : [])"


def _variables(kind: WorkloadKind, team_queues: dict[str, str], resource: str,
               controllers: dict[str, tuple[str, ...]]) -> list[dict]:
    queues = "{" + ", ".join(f"'{ns}': '{q}'" for ns, q in sorted(team_queues.items())) + "}"
    wants = (f"variables.podSpecs.exists(s, ({_containers('s')}).exists(c, "
             f"{_container_requests(resource)}) || (has(s.resourceClaims) && "
             "size(s.resourceClaims) > 0))")
    # An update that changes neither the pod specs nor the queue label was judged at create.
    unchanged = ("request.operation == 'UPDATE' && "
                 f"{_queue_of(kind, 'oldObject')} == variables.queue && "
                 f"({kind.pod_specs.format(o='oldObject')}) == variables.podSpecs")
    return [
        {"name": "podSpecs", "expression": kind.pod_specs.format(o="object")},
        {"name": "madeForJudgedParent", "expression": _made_by_controller(kind, controllers)},
        {"name": "teamQueues", "expression": queues},
        {"name": "queue", "expression": _queue_of(kind, "object")},
        {"name": "unchanged", "expression": unchanged},
        {"name": "wantsGpu", "expression": (
            f"!variables.madeForJudgedParent && !variables.unchanged && {wants}")},
    ]


def _validations(kind: WorkloadKind, resource: str) -> list[dict]:
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
                               f"queue){kind.where}'"),
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
                "variables": _variables(kind, team_queues, options.resource_name,
                                        options.workload_controllers),
                "validations": _validations(kind, options.resource_name),
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
