"""The Kubernetes backend with the official client against the fake API server, limited by
the shipped ClusterRole: the exact requests at start, at a reservation's edges, on a loan, on
a no-op, on drift, and the API's refusals as clear cluster problems."""

import json
from datetime import timedelta

import pytest

from gpuquota.core.errors import DomainError
from gpuquota.schedulers.backend import Action, BackendError, SchedulerObject
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.kubernetes.backend import MANAGED_KINDS, KubernetesBackend
from gpuquota.schedulers.models import (
    BackendConfig,
    Capabilities,
    Drift,
    Problem,
    ReconcileRun,
    ReservationBinding,
)
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer
from tests.kubernetes.fake_apiserver.server import VERBS

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def writes(server, since=0):
    return [(r.method, r.path) for r in server.requests[since:] if r.method != "GET"]


def quota(server, team, field="nominalQuota"):
    queue = server.get("ClusterQueue", f"gq-{team}")
    return int(queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][field])


def test_the_first_run_creates_everything_and_the_second_sends_no_write(kube, apiserver):
    kube.configure(apiserver)
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert summary.outcome == "ok", summary.error
    assert writes(apiserver) == [
        ("POST", f"{KUEUE}/resourceflavors"),
        ("POST", f"{KUEUE}/clusterqueues"), ("POST", f"{KUEUE}/clusterqueues"),
        ("POST", f"{KUEUE}/namespaces/speech/localqueues"),
        ("POST", f"{KUEUE}/namespaces/vision/localqueues"),
        ("POST", f"{KUEUE}/namespaces/vision-dev/localqueues"),
        *[("POST", f"{ADMISSION}/validatingadmissionpolicies")] * 9,
        *[("POST", f"{ADMISSION}/validatingadmissionpolicybindings")] * 9,
    ]
    flavor = apiserver.get("ResourceFlavor", "gq-h100-80gb")
    assert flavor["spec"]["nodeLabels"] == {"gpuquota.io/gpu-class": "h100-80gb"}
    vision = apiserver.get("ClusterQueue", "gq-vision")["spec"]
    assert vision["cohort"] == "gq-kube"
    assert vision["preemption"]["reclaimWithinCohort"] == "Any"
    assert vision["namespaceSelector"]["matchExpressions"][0]["values"] == ["vision",
                                                                           "vision-dev"]
    assert (quota(apiserver, "vision"), quota(apiserver, "vision", "lendingLimit")) == (2, 0)
    assert quota(apiserver, "speech") == 0
    local = apiserver.get("LocalQueue", "gq-vision", "vision-dev")
    assert local["spec"]["clusterQueue"] == "gq-vision"
    binding = ReservationBinding.objects.get(reservation=reservation)
    assert (binding.level, binding.scheduler_object) == ("quota", "gq-vision")
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.version == "v1.34.2" and caps.facts["kueue_api"] == "kueue.x-k8s.io/v1beta1"
    assert caps.facts["kueue_release"] == "v0.14.1" and caps.notes == []

    seen = len(apiserver.requests)
    again = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert (again.outcome, again.actions) == ("ok", [])
    assert writes(apiserver, seen) == []
    assert {r.method for r in apiserver.requests[seen:]} == {"GET"}


def test_quota_follows_the_lead_time_and_the_end_with_one_patch_each(kube, apiserver):
    kube.configure(apiserver, lead_time_s=900)
    start = NOW + timedelta(hours=1)
    kube.reserve("speech", kube.gpus["gpu-b"][:3], start=start, end=start + timedelta(hours=2))
    cluster_reconcile(cluster=kube.cluster, reason="test", at=start - timedelta(minutes=16))
    assert quota(apiserver, "speech") == 0

    seen = len(apiserver.requests)
    cluster_reconcile(cluster=kube.cluster, reason="edge", at=start - timedelta(minutes=15))
    assert writes(apiserver, seen) == [("PATCH", f"{KUEUE}/clusterqueues/gq-speech")]
    patch = next(r for r in apiserver.requests[seen:] if r.method == "PATCH")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["metadata"]["resourceVersion"]  # the precondition: no lost update
    assert quota(apiserver, "speech") == 3

    seen = len(apiserver.requests)
    cluster_reconcile(cluster=kube.cluster, reason="edge", at=start + timedelta(hours=2))
    assert writes(apiserver, seen) == [("PATCH", f"{KUEUE}/clusterqueues/gq-speech")]
    assert quota(apiserver, "speech") == 0


def test_a_loan_makes_its_gpu_lendable_in_the_cohort(kube, apiserver):
    kube.configure(apiserver)
    gpus = kube.gpus["gpu-a"][:2]
    reservation = kube.reserve("vision", gpus)
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    kube.lend(reservation, gpus[1])
    seen = len(apiserver.requests)
    cluster_reconcile(cluster=kube.cluster, reason="loan", at=NOW)
    assert writes(apiserver, seen) == [("PATCH", f"{KUEUE}/clusterqueues/gq-vision")]
    assert (quota(apiserver, "vision"), quota(apiserver, "vision", "lendingLimit")) == (2, 1)


def test_drift_is_repaired_and_recorded(kube, apiserver):
    kube.configure(apiserver)
    kube.reserve("vision", kube.gpus["gpu-a"][:2])
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    edited = apiserver.get("ClusterQueue", "gq-vision")
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "8"
    apiserver.put(edited)
    apiserver.remove("LocalQueue", "gq-speech", "speech")

    seen = len(apiserver.requests)
    summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert summary.drift == 2
    assert sorted(writes(apiserver, seen)) == [
        ("PATCH", f"{KUEUE}/clusterqueues/gq-vision"),
        ("POST", f"{KUEUE}/namespaces/speech/localqueues")]
    assert quota(apiserver, "vision") == 2
    assert set(Drift.objects.values_list("object_name", "kind", "repaired_at")) == {
        ("gq-vision", "changed", NOW), ("gq-speech/speech", "missing", NOW)}


def test_a_namespace_no_longer_mapped_loses_its_queue(kube, apiserver):
    kube.configure(apiserver)
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    identity = kube.cluster.identities.get(key="vision-dev")
    identity.valid_until = NOW - timedelta(minutes=1)
    identity.save()
    seen = len(apiserver.requests)
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert ("DELETE", f"{KUEUE}/namespaces/vision-dev/localqueues/gq-vision") in writes(
        apiserver, seen)
    assert apiserver.get("LocalQueue", "gq-vision", "vision-dev") is None


def test_a_stale_resource_version_is_refused_with_409_and_retried_next_run(kube, apiserver):

    kube.configure(apiserver)
    kube.reserve("vision", kube.gpus["gpu-a"][:1])
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    backend = KubernetesBackend(cluster=kube.cluster,
                                config=BackendConfig.objects.get(cluster=kube.cluster))
    current = next(o for o in backend.observe().objects if o.name == "gq-vision")
    apiserver.put(apiserver.get("ClusterQueue", "gq-vision"))  # someone wrote meanwhile
    stale = Action("update", SchedulerObject("ClusterQueue", "gq-vision", {
        "labels": current.fields["labels"], "spec": current.fields["spec"]}),
        before=dict(current.fields))
    with pytest.raises(BackendError, match="resourceVersion"):
        backend.apply_action(stale)
    assert apiserver.requests[-1].method == "PATCH"


def test_rbac_denied_is_a_clear_cluster_problem(kube):

    rules = shipped_rules()
    for rule in rules:
        if "localqueues" in rule["resources"]:
            rule["resources"] = [r for r in rule["resources"] if r != "localqueues"]
    rules.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"],
                  "verbs": ["list"]})
    server = FakeApiServer(token="t", rbac_rules=rules, rbac_roles=shipped_roles()).start()
    try:
        kube.configure(server)
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    finally:
        server.stop()
    assert summary.outcome == "partial"
    problems = Problem.objects.filter(cluster=kube.cluster, status="open").order_by("summary")
    assert [p.summary.split(":")[0] for p in problems] == [
        "create LocalQueue gq-speech/speech", "create LocalQueue gq-vision/vision-dev",
        "create LocalQueue gq-vision/vision"]  # one each, the rest applied
    problem = problems[0]
    assert "RBAC" in problem.summary and "deploy/kubernetes/base/rbac.yaml" in problem.summary
    assert "cannot create resource \"localqueues\"" in problem.detail


def test_an_invalid_object_is_refused_with_422_naming_the_field(kube, apiserver):
    labels = {f"example.org/k{i}": "v" for i in range(9)}  # Kueue allows 8
    kube.configure(apiserver, flavors={"H100-80GB": {"node_labels": labels}})
    summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert summary.outcome == "partial"  # the flavor was refused, the rest went in
    problem = Problem.objects.get(cluster=kube.cluster, status="open")
    assert "invalid" in problem.summary and "spec.nodeLabels" in problem.summary
    assert apiserver.get("ClusterQueue", "gq-vision") is not None


def test_a_wrong_token_is_reported(kube, apiserver):
    kube.configure(apiserver)
    kube.cluster.backend_config.token_encrypted = ""
    kube.cluster.backend_config.save()
    summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert summary.outcome == "failed" and "token" in summary.error


def test_without_kueue_reservations_are_advisory_and_nothing_is_written(kube):

    server = FakeApiServer(token="t", groups={"admissionregistration.k8s.io"}).start()
    try:
        kube.configure(server)
        reservation = kube.reserve("vision", kube.gpus["gpu-a"][:1])
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    finally:
        server.stop()
    assert summary.outcome == "ok" and writes(server) == []
    assert ReservationBinding.objects.get(reservation=reservation).level == "advisory"
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.best_binding == "advisory" and "Kueue is not installed" in caps.notes[0]


def test_the_cluster_role_is_exactly_what_the_backend_uses(kube):
    """Every rule's verb is used in these scenarios, and nothing else is asked for; outside
    the ClusterRole only Kueue's controller Deployment is read, as the shipped Role allows."""

    server = FakeApiServer(token="t", rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                           version="v1.37.0").start()
    server.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "pool": {
                    "name": "gpu-a", "resourceSliceCount": 1, "generation": 1},
                    "nodeName": "gpu-a", "devices": []}})
    try:
        kube.configure(server, exact_gpus=True)
        first = kube.reserve("vision", kube.gpus["gpu-a"][:1], end=NOW + timedelta(hours=1))
        cluster_reconcile(cluster=kube.cluster, reason="t", at=NOW)
        kube.lend(first, kube.gpus["gpu-a"][0])
        cluster_reconcile(cluster=kube.cluster, reason="t", at=NOW)  # patches
        cluster_reconcile(cluster=kube.cluster, reason="t", at=NOW + timedelta(hours=1))
        used, named = set(), set()
        for r in server.requests:
            if r.path.rstrip("/") in ("/version", "/apis") or r.path.count("/") == 3:
                continue  # discovery, which every authenticated client may read
            parts = r.path.strip("/").split("/")
            group = "" if parts[0] == "api" else parts[1]
            rest = parts[2:] if parts[0] == "api" else parts[3:]
            namespace = ""
            if rest[0] == "namespaces" and len(rest) >= 3:
                namespace, rest = rest[1], rest[2:]
            verb = VERBS.get(r.method) or ("get" if len(rest) > 1 else "list")
            if verb == "get":
                named.add((namespace, group, rest[0], rest[1]))
            else:
                used.add((group, rest[0], verb))
    finally:
        server.stop()
    granted = {(g, res, v) for rule in shipped_rules() for g in rule["apiGroups"]
               for res in rule["resources"] for v in rule["verbs"]}
    # What the backend can be asked to do (the diff yields create, update or delete on any
    # kind it manages; observe lists them; capabilities read the DRA driver's slices)...
    designed = {(KINDS[k].group, KINDS[k].plural, verb) for k in MANAGED_KINDS
                for verb in Api.rbac_verbs} | {("resource.k8s.io", "resourceslices", "list"),
                                               ("resource.k8s.io", "resourceclaims", "list"),
                                               ("kueue.x-k8s.io", "workloads", "list"),
                                               # drains (gpuquota.reliability): cordon, taint
                                               ("", "nodes", "list"), ("", "nodes", "patch"),
                                               # zero-use pods stopped (gpuquota.jobs)
                                               ("", "pods", "list"), ("", "pods", "delete"),
                                               ("batch", "jobs", "list"),
                                               ("batch", "jobs", "patch"),
                                               ("kueue.x-k8s.io", "workloads", "patch")}
    assert granted == designed
    # ...and these runs used every kind of call, none outside the grant.
    assert used <= granted and {v for _, _, v in used} == set(Api.rbac_verbs)
    role_grants = {(ns, g, res, name) for ns, rules in shipped_roles().items()
                   for rule in rules for g in rule["apiGroups"] for res in rule["resources"]
                   for name in rule["resourceNames"] if rule["verbs"] == ["get"]}
    assert named == role_grants == {("kueue-system", "apps", "deployments",
                                     "kueue-controller-manager")}


def test_the_dry_run_renders_kubectl_commands_and_writes_nothing(kube, apiserver):
    kube.configure(apiserver)
    kube.reserve("vision", kube.gpus["gpu-a"][:2])
    summary = cluster_reconcile(cluster=kube.cluster, reason="dry", at=NOW, dry_run=True)
    assert summary.outcome == "dry_run" and writes(apiserver) == []

    commands = ReconcileRun.objects.get(outcome="dry_run").commands
    assert commands[0].startswith("kubectl create -f - <<'EOF'\n")
    manifest = json.loads(commands[0].split("\n")[1])
    assert manifest["kind"] == "ResourceFlavor" and manifest["metadata"]["name"] == "gq-h100-80gb"


def test_unusable_options_are_a_cluster_problem_not_a_crash(kube, apiserver):
    with pytest.raises(DomainError, match="lead_time_s"):  # refused where they enter...
        kube.configure(apiserver, lead_time_s=-5)
    kube.configure(apiserver)  # ...and, stored before that check, at each run
    BackendConfig.objects.filter(cluster=kube.cluster).update(options={"lead_time_s": -5})
    summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    assert summary.outcome == "failed" and "lead_time_s" in summary.error
    assert writes(apiserver) == []
    assert Problem.objects.filter(cluster=kube.cluster, status="open").exists()
