"""Kueue's release, read from its controller Deployment through the fake API server: the
image tag, the label when the tag says nothing, 403 and 404 as notes (never a failed run),
an old release's notes and advisory level, and the cluster page showing it."""

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.core.errors import DomainError
from gpuquota.schedulers.kubernetes.kueue_release import (
    Release,
    image_tag,
    release_from_deployment,
    release_notes,
)
from gpuquota.schedulers.models import BackendConfig, Capabilities, Problem, ReservationBinding
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer
from tests.kubernetes.fake_apiserver.resources import kueue_controller

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
DEPLOYMENT = "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager"
DIGEST = "sha256:" + "ab" * 32
WHERE = "Deployment kueue-system/kueue-controller-manager"


def served(image=None, *, labels=None, rules=True) -> FakeApiServer:
    server = FakeApiServer(token="t", kueue_image=None,
                           rbac_rules=shipped_rules() if rules else None,
                           rbac_roles=shipped_roles() if rules else None).start()
    if image:
        server.put(kueue_controller(image=image, labels=labels))
    return server


def reconcile(kube, server, **options):
    try:
        kube.configure(server, **options)
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    finally:
        server.stop()
    return summary, Capabilities.objects.get(cluster=kube.cluster)


def reads(server) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in server.requests if "/deployments" in r.path]


@pytest.mark.parametrize(("image", "tag"), [
    ("registry.k8s.io/kueue/kueue:v0.14.1", "v0.14.1"),
    (f"registry.k8s.io/kueue/kueue:v0.14.1@{DIGEST}", "v0.14.1"),
    (f"registry.k8s.io/kueue/kueue@{DIGEST}", ""),
    ("mirror.example.org:5000/kueue/kueue", ""),
    ("mirror.example.org:5000/kueue/kueue:0.13.4", "0.13.4"),
    ("gcr.io/k8s-staging-kueue/kueue:main", "main"),
])
def test_the_tag_of_an_image_reference(image, tag):
    assert image_tag(image) == tag


def test_odd_tags_fall_back_to_the_label_and_say_why_when_it_is_missing_too():
    staging = kueue_controller(image="gcr.io/k8s-staging-kueue/kueue:main")
    assert release_from_deployment(staging, where=WHERE) == Release(unknown_why=(
        f"{WHERE}: its image tag 'main' is not a release (gcr.io/k8s-staging-kueue/kueue:main)"
        "; no app.kubernetes.io/version label"))
    pinned = kueue_controller(image=f"registry.k8s.io/kueue/kueue@{DIGEST}",
                              labels={"app.kubernetes.io/version": "0.13.4"})
    assert release_from_deployment(pinned, where=WHERE) == Release(
        "v0.13.4", f"label app.kubernetes.io/version of {WHERE}")
    renamed = kueue_controller()
    renamed["spec"]["template"]["spec"]["containers"].append({"name": "proxy", "image": "x"})
    renamed["spec"]["template"]["spec"]["containers"][0]["name"] = "kueue"
    assert "has no container named manager" in release_from_deployment(
        renamed, where=WHERE).unknown_why
    candidate = kueue_controller(image="registry.k8s.io/kueue/kueue:v0.15.0-rc.1")
    assert release_from_deployment(candidate, where=WHERE).minor == (0, 15)


def test_the_release_comes_from_the_manager_image_tag(kube):
    server = served("registry.k8s.io/kueue/kueue:v0.14.1")
    summary, caps = reconcile(kube, server)
    assert summary.outcome == "ok", summary.error
    assert reads(server) == [("GET", DEPLOYMENT)]
    assert caps.facts["kueue_release"] == "v0.14.1"
    assert caps.facts["kueue_release_source"] == (
        f"image tag of {WHERE} (registry.k8s.io/kueue/kueue:v0.14.1)")
    assert caps.best_binding == "quota" and caps.notes == []


def test_a_digest_pinned_image_falls_back_to_the_version_label(kube):
    server = served(f"registry.k8s.io/kueue/kueue@{DIGEST}",
                    labels={"app.kubernetes.io/version": "v0.13.4"})
    summary, caps = reconcile(kube, server)
    assert summary.outcome == "ok", summary.error
    assert (caps.facts["kueue_release"], caps.facts["kueue_release_source"]) == (
        "v0.13.4", f"label app.kubernetes.io/version of {WHERE}")
    assert reads(server) == [("GET", DEPLOYMENT)]


def test_no_access_is_a_note_naming_the_role_not_a_failed_run(kube):
    server = FakeApiServer(token="t", kueue_image="registry.k8s.io/kueue/kueue:v0.14.1",
                           rbac_rules=shipped_rules()).start()  # the Role is not applied
    summary, caps = reconcile(kube, server)
    assert summary.outcome == "ok", summary.error
    assert reads(server) == [("GET", DEPLOYMENT)]
    assert caps.facts["kueue_release"] == "" and caps.best_binding == "quota"
    assert "RBAC" in caps.facts["kueue_release_unknown"]
    assert "deploy/kubernetes/kueue/rbac.yaml" in caps.notes[0]
    assert caps.notes[0].startswith("The Kueue release is unknown (")
    assert not Problem.objects.filter(cluster=kube.cluster, status="open").exists()
    assert len(server.writes()) == 24  # the queues and policies went in all the same


def test_no_deployment_is_a_note_and_the_options_say_where_to_look(kube):
    server = served()
    summary, caps = reconcile(kube, server)
    assert summary.outcome == "ok", summary.error
    assert reads(server) == [("GET", DEPLOYMENT)]
    assert "there is no Deployment kueue-system/kueue-controller-manager (set the options " \
           "kueue_namespace and kueue_deployment" in caps.notes[0]
    assert caps.best_binding == "quota" and len(server.writes()) == 24

    elsewhere = served("registry.k8s.io/kueue/kueue:v0.14.1", rules=False)
    elsewhere.remove("Deployment", "kueue-controller-manager", "kueue-system")
    moved = kueue_controller(namespace="batch-system", name="kueue")
    elsewhere.put(moved)
    _, caps = reconcile(kube, elsewhere, kueue_namespace="batch-system",
                        kueue_deployment="kueue")
    assert reads(elsewhere) == [("GET", "/apis/apps/v1/namespaces/batch-system/deployments/kueue")]
    assert caps.facts["kueue_release"] == "v0.14.1"


def test_unusable_kueue_options_are_refused_naming_the_option(kube):
    server = served()
    try:
        with pytest.raises(DomainError, match="kueue_namespace"):
            kube.configure(server, kueue_namespace="Kueue_System")
        kube.configure(server)
        BackendConfig.objects.filter(cluster=kube.cluster).update(
            options={"kueue_namespace": "Kueue_System"})
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    finally:
        server.stop()
    assert summary.outcome == "failed" and "kueue_namespace" in summary.error
    assert server.writes() == []


def test_a_release_too_old_for_the_plan_is_advisory_and_nothing_is_written(kube):
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    server = served("registry.k8s.io/kueue/kueue:v0.7.1")
    summary, caps = reconcile(kube, server)
    assert summary.outcome == "ok", summary.error
    assert server.writes() == []
    assert caps.best_binding == "advisory" and caps.facts["kueue_writable"] is False
    assert caps.notes[0].startswith("Kueue v0.7.1 cannot hold the queues gpuquota writes")
    assert "LocalQueue stopPolicy needs Kueue >= 0.8; this cluster runs Kueue v0.7.1." in (
        caps.notes)
    assert any(n.startswith("lendingLimit needs Kueue >= 0.9") for n in caps.notes)
    assert any(n.startswith("loan returns need Kueue >= 0.8") for n in caps.notes)
    assert not any("excludeResourcePrefixes" in n for n in caps.notes)  # 0.7 has it
    binding = ReservationBinding.objects.get(reservation=reservation)
    assert binding.level == "advisory" and "Kueue v0.7.1 cannot hold" in binding.why


def test_a_release_that_holds_the_plan_but_ignores_lending_limits_says_so(kube):
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    summary, caps = reconcile(kube, served("registry.k8s.io/kueue/kueue:v0.8.4"))
    assert summary.outcome == "ok", summary.error
    assert caps.best_binding == "quota"
    assert [n.split(" (")[0] for n in caps.notes] == ["lendingLimit needs Kueue >= 0.9"]
    assert ReservationBinding.objects.get(reservation=reservation).level == "quota"


def test_each_gap_is_cited_with_its_release():
    notes, holds = release_notes(Release("v0.4.1", "label"))
    assert not holds
    assert [n.split(" need")[0] for n in notes[1:]] == [
        "ClusterQueue flavorFungibility and ResourceFlavor tolerations",
        "ClusterQueue lendingLimit, preemption.borrowWithinCohort and stopPolicy",
        "LocalQueue stopPolicy", "resources.excludeResourcePrefixes in Kueue's configuration",
        "loan returns", "lendingLimit"]
    newer, holds = release_notes(Release("v0.16.2", "tag"))
    assert holds and len(newer) == 1 and "v1beta2 (since 0.15)" in newer[0]
    assert release_notes(Release("v0.9.0", "tag")) == ([], True)


def test_the_cluster_page_shows_the_release_or_why_it_is_unknown(kube):
    reconcile(kube, served("registry.k8s.io/kueue/kueue:v0.14.1"))
    admin = Client()
    admin.force_login(kube.admin)
    url = reverse("kubernetes_cluster", args=["kube"])
    row = admin.get(url).content.decode().split('id="kueue-release"')[1].split("</tr>")[0]
    assert "v0.14.1" in row and "image tag of Deployment kueue-system/" in row

    reconcile(kube, served())
    html = admin.get(url).content.decode()
    row = html.split('id="kueue-release"')[1].split("</tr>")[0]
    assert "unknown" in row and f"there is no {WHERE}" in row
