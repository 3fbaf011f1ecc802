"""deploy/kubernetes: every object of the production overlay valid against Kubernetes 1.37's
schemas (strict: an unknown field fails), and the properties the docs promise."""

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.urls import resolve

from tests.kubernetes.kustomize import render

pytestmark = pytest.mark.kubernetes
DEPLOY = Path(settings.BASE_DIR) / "deploy" / "kubernetes"
K8S_VERSION = "1.37.0"
APP_PODS = ("gpuquota-web", "gpuquota-worker", "gpuquota-beat", "gpuquota-migrate")


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render(DEPLOY / "overlays" / "production")


def by(objects, kind, name) -> dict:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def pod_spec(obj) -> dict:
    return obj["spec"]["template"]["spec"]


def test_every_object_is_valid_for_kubernetes_1_37(objects):
    assert len(objects) >= 20
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_validation_refuses_a_misspelt_field(objects):
    broken = yaml.safe_load(yaml.safe_dump(by(objects, "Deployment", "gpuquota-web")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_base_lists_every_file_and_the_agent_manifest_moved_in():
    listed = set(yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in (DEPLOY / "base").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert not (DEPLOY.parent / "agent" / "daemonset.yaml").exists()
    assert "deploy/kubernetes/base/agent.yaml" in (Path(settings.BASE_DIR) / "docs" / "agent.md"
                                                   ).read_text()


def test_the_overlay_sets_images_and_replicas_and_beat_stays_one(objects):
    web, worker = by(objects, "Deployment", "gpuquota-web"), by(objects, "Deployment",
                                                                   "gpuquota-worker")
    assert (web["spec"]["replicas"], worker["spec"]["replicas"]) == (3, 4)
    beat = by(objects, "Deployment", "gpuquota-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    images = {c["image"] for o in objects if o["kind"] in ("Deployment", "DaemonSet", "Job")
              for c in pod_spec(o)["containers"] + pod_spec(o).get("initContainers", [])}
    assert images == {"registry.example.org/gpuquota:1.0.0",
                      "registry.example.org/gpuquota-agent:1.0.0"}
    namespaces = {(o["kind"], o["metadata"].get("namespace")) for o in objects
                  if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")}
    assert {ns for kind, ns in namespaces if kind not in ("Role", "RoleBinding")} == {
        "gpuquota"}
    assert {(kind, ns) for kind, ns in namespaces if kind in ("Role", "RoleBinding")} == {
        ("Role", "kueue-system"), ("RoleBinding", "kueue-system")}  # not moved by the base


def test_app_pods_run_non_root_read_only_with_requests_and_the_external_secret(objects):
    for name in APP_PODS:
        obj = by(objects, "Job" if name.endswith("migrate") else "Deployment", name)
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"]["memory"]
            assert {"secretRef": {"name": "gpuquota-env"}} in container["envFrom"]
    assert not [o for o in objects if o["kind"] == "Secret"]  # a site's, never shipped


def test_web_probes_readiness_and_liveness_apart_and_pdbs_cover_web_and_worker(objects):
    web = pod_spec(by(objects, "Deployment", "gpuquota-web"))["containers"][0]
    paths = {probe: web[probe]["httpGet"]["path"] for probe in ("readinessProbe", "livenessProbe")}
    assert paths == {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for path in paths.values():  # the product's own views, which read no session
        assert resolve(path).url_name == path.strip("/")
    compose = yaml.safe_load((Path(settings.BASE_DIR) / "docker-compose.yml").read_text())
    assert "/readyz" in " ".join(compose["services"]["web"]["healthcheck"]["test"])
    pdbs = {o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
            for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert pdbs == {"gpuquota-web", "gpuquota-worker"}
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    deny = by(objects, "NetworkPolicy", "gpuquota-default-deny")
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    assert len(policies) >= 3


def test_the_agent_enrols_with_the_bootstrap_secret_and_its_node_name(objects):
    agent = by(objects, "DaemonSet", "gpuquota-agent")
    spec = pod_spec(agent)
    assert spec["automountServiceAccountToken"] is False
    container = spec["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUQUOTA_AGENT_HOSTNAME"]["valueFrom"] == {"fieldRef": {"fieldPath":
                                                                        "spec.nodeName"}}
    assert container["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["bootstrap"]["secret"]["secretName"] == "gpuquota-agent-bootstrap"
    config = yaml.safe_load(by(objects, "ConfigMap", "gpuquota-agent")["data"]["agent.toml"]
                            .replace(" = ", ": "))
    assert config["bootstrap_file"].startswith("/etc/gpuquota-bootstrap/")
    assert config["token_file"].startswith("/var/lib/gpuquota-agent/")


def test_only_the_worker_holds_the_reconciler_account_and_rbac_has_no_wildcards(objects):
    accounts = {o["metadata"]["name"]: pod_spec(o).get("serviceAccountName")
                for o in objects if o["kind"] in ("Deployment", "Job", "DaemonSet")}
    assert [n for n, a in accounts.items() if a == "gpuquota-reconciler"] == ["gpuquota-worker"]
    role = by(objects, "ClusterRole", "gpuquota-reconciler")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert not {"get", "watch", "update", "deletecollection"} & set(rule["verbs"])
    binding = by(objects, "ClusterRoleBinding", "gpuquota-reconciler")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuquota-reconciler",
                                    "namespace": "gpuquota"}]


def test_outside_gpuquota_the_reconciler_may_only_get_kueues_controller(objects):
    roles = [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    assert [(o["kind"], o["metadata"]["name"]) for o in roles] == [
        ("Role", "gpuquota-kueue-release"), ("RoleBinding", "gpuquota-kueue-release")]
    assert by(objects, "Role", "gpuquota-kueue-release")["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"],
         "resourceNames": ["kueue-controller-manager"], "verbs": ["get"]}]
    binding = by(objects, "RoleBinding", "gpuquota-kueue-release")
    assert binding["roleRef"]["name"] == "gpuquota-kueue-release"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuquota-reconciler",
                                    "namespace": "gpuquota"}]


def test_kubectl_renders_the_same_objects_where_it_is_installed(objects):
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # the renderer above stands in for it: nothing to compare with
        return
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY / "overlays" / "production")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    theirs = sorted(yaml.safe_dump(o, sort_keys=True) for o in yaml.safe_load_all(out) if o)
    ours = sorted(yaml.safe_dump(o, sort_keys=True) for o in objects)
    assert ours == theirs
