"""The Kubernetes backend (kubernetes.md): reservations as Kueue quotas per team (binding
level `quota`), admission policies keeping GPU workloads in their team's queue, and in the
opt-in exact-GPU mode DRA claims pinned to the reserved GPUs' UUIDs (`exact_gpus`). Without
Kueue a reservation is `advisory` and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

import yaml

from gpuquota.core.errors import DomainError
from gpuquota.core.names import team_slug_error
from gpuquota.schedulers.backend import (
    Action,
    Backend,
    BackendError,
    Binding,
    CapabilityReport,
    ForeignUse,
    JobStopped,
    Observed,
    Plan,
    SchedulerObject,
)
from gpuquota.schedulers.kubernetes import device_drain, drain, drain_progress, jobstop
from gpuquota.schedulers.kubernetes.admission import admission_objects
from gpuquota.schedulers.kubernetes.api import Api, api_client
from gpuquota.schedulers.kubernetes.capabilities import detect, taint_rules_version
from gpuquota.schedulers.kubernetes.foreign import foreign_uses
from gpuquota.schedulers.kubernetes.kueue_release import Release
from gpuquota.schedulers.kubernetes.names import manifest_refusal, namespaces_usable
from gpuquota.schedulers.kubernetes.objects import (
    dra_objects,
    kueue_objects,
    queue_name,
)
from gpuquota.schedulers.kubernetes.options import KubernetesOptions, options_parse
from gpuquota.schedulers.kubernetes.stored import server_form
from gpuquota.schedulers.models import BindingLevel
from gpuquota.schedulers.secrets import secret_decrypt
from gpuquota.schedulers.selectors import plan_inputs

MANAGED_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "ValidatingAdmissionPolicy",
                 "ValidatingAdmissionPolicyBinding", "ResourceClaimTemplate", "DeviceTaintRule")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def object_key(obj: dict) -> str:
    """The scheduler-object name: `gq-...` and, for a namespaced object, `/namespace`."""
    meta = obj["metadata"]
    return f"{meta['name']}/{meta['namespace']}" if meta.get("namespace") else meta["name"]


def _from_key(name: str) -> tuple[str, str]:
    object_name, _, namespace = name.partition("/")
    return object_name, namespace


class KubernetesBackend(Backend):
    scheduler = "kubernetes"
    kinds = MANAGED_KINDS
    independent_objects = True  # one team's refused object never holds up the others

    @classmethod
    def options_check(cls, options: dict, *, cluster) -> None:
        options_parse(options, cluster_slug=cluster.slug)  # and the names it refuses

    @classmethod
    def foreign_use(cls, *, clusters, period, team=None) -> list[ForeignUse]:
        """From the agents' process records: Kubernetes keeps no record of which pod held
        which GPU once it is gone."""
        return [use for cluster in clusters for use in foreign_uses(
            cluster=cluster, start=period.start, end=period.end, team=team)]

    def __init__(self, *, cluster, config):
        super().__init__(cluster=cluster, config=config)
        self._options: KubernetesOptions | None = None
        self._api: Api | None = None
        self._planned: dict[tuple[str, str], dict] = {}
        self._served: set[str] | None = None  # the kinds served, once capabilities ran

    @property
    def options(self) -> KubernetesOptions:
        """The backend's options; unusable ones stop the run as a cluster problem."""
        if self._options is None:
            try:
                self._options = options_parse(self.config.options,
                                              cluster_slug=self.cluster.slug)
            except DomainError as exc:
                raise BackendError(f"The Kubernetes options are unusable: {exc.message}") from None
        return self._options

    @property
    def api(self) -> Api:
        if self._api is None:
            try:
                token = secret_decrypt(self.config.token_encrypted)
            except ValueError as exc:
                raise BackendError(str(exc)) from None
            self._api = Api(api_client(api_url=self.config.api_url, token=token,
                                       timeout_s=self.config.command_timeout_s,
                                       ca_file=self.options.ca_file))
        return self._api

    def node_drain(self, *, hostname: str, reason: str) -> None:
        drain.node_drain(self.api, hostname, reason)

    def node_resume(self, *, hostname: str) -> bool:
        return drain.node_resume(self.api, hostname)

    def drains_progress(self, *, nodes: list[str],
                        gpus: list[tuple[str, int]]) -> dict[tuple, str]:
        return drain_progress.drains_progress(self.api, driver=self.options.dra_driver,
                                              nodes=nodes, gpus=gpus)

    def gpu_drain_plan(self, *, hostname: str, index: int, uuid: str, reason: str,
                       at_once: bool) -> SchedulerObject | None:
        """A DeviceTaintRule on the GPU's DRA device, where the cluster has them."""
        driver = self.options.dra_driver
        version = device_drain.taints_version(self.api, driver=driver, hostname=hostname,
                                              index=index, uuid=uuid)
        if not version:
            return None
        manifest = device_drain.drain_rule(
            hostname=hostname, index=index, reason=reason, at_once=at_once, driver=driver,
            cluster_slug=self.cluster.slug,
            api_version=self.api.kind("DeviceTaintRule").api_version)
        refused = manifest_refusal(manifest)
        if refused:
            raise BackendError(refused)
        return device_drain.as_object(manifest)

    def gpu_drain(self, *, obj: SchedulerObject) -> None:
        device_drain.rule_write(self.api, self._manifest(obj))

    def gpu_resume(self, *, hostname: str, index: int, uuid: str) -> SchedulerObject:
        name = device_drain.rule_name(hostname, index)
        if taint_rules_version(self.api, self.api.groups()):  # else no rule can hold it now
            device_drain.rule_delete(self.api, name)
        return SchedulerObject("DeviceTaintRule", name)

    def job_stop(self, *, job_id: str, namespace: str = "", requeue: bool = False,
                 started_at=None) -> JobStopped:
        """A pod: `job_id` its name (no requeue on Kubernetes: a suspended Job resumes)."""
        return jobstop.pod_stop(self.api, job_id, namespace, started_at=started_at)

    def capabilities(self) -> CapabilityReport:
        report = detect(self.api, options=self.options)
        self._served = set(report.facts["served_kinds"])
        return report

    def plan(self, at: datetime, *, capabilities: CapabilityReport) -> Plan:
        inputs = plan_inputs(cluster=self.cluster, at=at)
        facts, slug = capabilities.facts, self.cluster.slug
        manifests: list[dict] = []
        if facts.get("kueue_writable"):
            manifests += kueue_objects(inputs, cluster_slug=slug, options=self.options,
                                       kueue_minor=Release(facts.get("kueue_release", "")).minor)
            queues = {ns: queue_name(t.slug) for t in inputs.teams.values()
                      for ns in namespaces_usable(t.namespaces)}
            manifests += admission_objects(queues, cluster_slug=slug, options=self.options)
        exact = capabilities.best_binding == BindingLevel.EXACT_GPUS
        if exact:
            taints = self.api.kind("DeviceTaintRule").api_version if facts.get(
                "device_taint_rules") else ""
            manifests += dra_objects(inputs, cluster_slug=slug, options=self.options,
                                     taint_api_version=taints)
        if facts.get("gpu_drains"):
            version = self.api.kind("DeviceTaintRule").api_version
            manifests += [device_drain.drain_rule(
                hostname=hostname, index=index, reason=reason, at_once=at_once,
                driver=self.options.dra_driver, cluster_slug=slug, api_version=version)
                for hostname, index, reason, at_once in inputs.drained_gpus]
        plan = Plan(at=at)
        self._planned = {}
        for manifest in manifests:
            obj = SchedulerObject(manifest["kind"], object_key(manifest), {
                "labels": _canonical(manifest["metadata"]["labels"]),
                "spec": _canonical(manifest["spec"])})
            self._planned[obj.key] = manifest
            plan.objects.append(obj)
        for r in inputs.reservations:
            plan.bindings[r.id] = self._binding(r, capabilities, exact=exact)
        return plan

    def _binding(self, reservation, capabilities: CapabilityReport, *, exact: bool) -> Binding:
        facts = capabilities.facts
        misnamed = team_slug_error(reservation.team_slug)
        if misnamed and (exact or facts.get("kueue_writable")):
            return Binding(BindingLevel.ADVISORY, f"{misnamed} Nothing of the team is written "
                           "to the cluster until an admin corrects it: nothing holds the GPUs")
        if exact:
            others = ("" if facts.get("device_taint_rules") else
                      "; nothing keeps other teams' claims off these GPUs here (the cluster "
                      "serves no DeviceTaintRules: see its capabilities)")
            return Binding(BindingLevel.EXACT_GPUS,
                           "DRA claims pinned to the reserved GPUs' UUIDs (use the claim template "
                           f"gq-res-{reservation.id}); Kueue cannot count such claims against "
                           f"quotas yet{others}", f"gq-res-{reservation.id}")
        if facts.get("kueue_writable"):
            return Binding(BindingLevel.QUOTA,
                           f"Kueue nominalQuota of ClusterQueue {queue_name(reservation.team_slug)}"
                           f" from {self.options.lead_time_s} s before the start (label your "
                           "workloads kueue.x-k8s.io/queue-name: "
                           f"{queue_name(reservation.team_slug)})",
                           queue_name(reservation.team_slug))
        if facts.get("kueue_api"):
            return Binding(BindingLevel.ADVISORY,
                           f"Kueue {facts.get('kueue_release')} cannot hold gpuquota's queues "
                           "(it needs Kueue >= 0.8): nothing holds the GPUs")
        return Binding(BindingLevel.ADVISORY, "the cluster has no Kueue: nothing holds the GPUs")

    def observe(self) -> Observed:
        selector = f"app.kubernetes.io/managed-by=gpuquota,gpuquota.io/cluster={self.cluster.slug}"
        observed = Observed()
        if self._served is None:
            self.capabilities()
        for kind in MANAGED_KINDS:
            if kind not in self._served:
                continue
            for item in self.api.list(self.api.kind(kind), selector):
                name = object_key(item)
                planned = self._planned.get((kind, name))
                spec = server_form(kind, item.get("spec", {}), planned and planned["spec"])
                observed.objects.append(SchedulerObject(kind, name, {
                    "labels": _canonical({k: v for k, v in item["metadata"].get(
                        "labels", {}).items() if k.startswith(("gpuquota.io/", "app.kube"))}),
                    "spec": _canonical(spec),
                    "resourceVersion": item["metadata"].get("resourceVersion", "")}))
        return observed

    def _manifest(self, obj: SchedulerObject) -> dict:
        name, namespace = _from_key(obj.name)
        metadata = {"name": name, "labels": json.loads(obj.fields["labels"])}
        if namespace:
            metadata["namespace"] = namespace
        return {"apiVersion": self.api.kind(obj.kind).api_version, "kind": obj.kind,
                "metadata": metadata, "spec": json.loads(obj.fields["spec"])}

    def apply_action(self, action: Action) -> None:
        kind = self.api.kind(action.obj.kind)
        name, namespace = _from_key(action.obj.name)
        refused = action.verb != "delete" and manifest_refusal(self._manifest(action.obj))
        if refused:
            raise BackendError(refused)
        if action.verb == "create":
            self.api.create(kind, self._manifest(action.obj))
        elif action.verb == "update":
            manifest = self._manifest(action.obj)
            patch = {"metadata": {"labels": manifest["metadata"]["labels"]},
                     "spec": manifest["spec"]}
            if action.before.get("resourceVersion"):
                patch["metadata"]["resourceVersion"] = action.before["resourceVersion"]
            self.api.patch(kind, name, namespace, patch)
        elif action.verb == "delete":
            self.api.delete(kind, name, namespace)
        else:
            raise BackendError(f"Unknown action {action.verb}.")

    def render(self, actions: Iterable[Action]) -> list[str]:
        commands = []
        for action in actions:
            kind = self.api.kind(action.obj.kind)
            name, namespace = _from_key(action.obj.name)
            ns = f" -n {namespace}" if namespace else ""
            resource = f"{kind.plural}.{kind.group}"
            if action.verb == "create":
                commands.append("kubectl create -f - <<'EOF'\n"
                                + json.dumps(self._manifest(action.obj), sort_keys=True)
                                + "\nEOF")
            elif action.verb == "update":
                spec = json.loads(action.obj.fields["spec"])
                commands.append(f"kubectl patch {resource} {name}{ns} --type merge -p '"
                                + json.dumps({"spec": spec}, sort_keys=True) + "'")
            else:
                commands.append(f"kubectl delete {resource} {name}{ns}")
        return commands

    def export(self, plan: Plan) -> dict[str, str]:
        """The plan as one manifest file for `kubectl apply -f` (sites that forbid writes)."""
        manifests = [self._manifest(obj) for obj in plan.objects]
        return {"gpuquota-kubernetes.yaml": yaml.safe_dump_all(manifests, sort_keys=False)}
