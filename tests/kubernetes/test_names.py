"""Names Kubernetes refuses: checked where they enter (team slugs, namespaces, the backend's
options), and a name that reaches the reconcile all the same (entered before the checks, or
a namespace missing on the cluster) is a problem of its own team while the rest of the plan
is applied."""

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from accounts.models import ClusterIdentity, Team
from accounts.services import identity_save
from gpuquota.core.errors import DomainError
from gpuquota.schedulers.models import Problem, ReconcileRun, ReservationBinding
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.factories import TeamFactory
from tests.kubernetes.conftest import NOW, TOKEN, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
LONG = "a" * 61


@pytest.mark.parametrize(("slug", "why"), [
    ("ml_platform-emea", "may hold only lower-case letters, digits and"),
    ("ML-platform", "may hold only lower-case letters, digits and"),
    ("-ml", "start and end with a letter or digit"),
    (LONG, "at most 60, so that gq-"),
    ("b" * 64, "at most 63"),
])
def test_a_team_slug_kubernetes_refuses_is_refused_on_the_admin_form(kube, slug, why):
    admin = Client()
    admin.force_login(kube.admin)
    page = admin.post("/admin/accounts/team/add/", {
        "name": "ML Platform", "slug": slug, "cost_center": "",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and why in page.content.decode()
    assert not Team.objects.filter(name="ML Platform").exists()
    with pytest.raises(ValidationError, match="slug"):
        Team(name="x", slug=slug).full_clean()
    Team(name="ML Platform", slug="ml-platform-emea").full_clean()


def test_a_namespace_kubernetes_refuses_is_refused_where_it_enters(kube):
    team = kube.teams["vision"]
    for key in ("Vision_Dev", "vision.dev", "x" * 64, "vision dev"):
        with pytest.raises(ValidationError) as refused:
            identity_save(identity=ClusterIdentity(
                cluster=kube.cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE, key=key,
                team=team, valid_from=NOW), actor=kube.admin)
        assert "A Kubernetes namespace" in str(refused.value.message_dict["key"])
    identity_save(identity=ClusterIdentity(
        cluster=kube.cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE, key="vision-prod",
        team=team, valid_from=NOW), actor=kube.admin)


def test_the_backend_options_are_checked_when_they_are_saved(kube):
    with pytest.raises(DomainError, match="The cohort may hold only"):
        kube.configure(FakeApiServer(token=TOKEN), cohort="Not_A_Name")
    with pytest.raises(DomainError, match="The node label example.org/pool of L4"):
        kube.configure(FakeApiServer(token=TOKEN),
                       flavors={"L4": {"node_labels": {"example.org/pool": "a b"}}})


def test_one_badly_named_team_never_blocks_the_others(kube):
    """Names from before the checks, written straight into the database, and a namespace
    the cluster does not have: each is a problem naming its team, everything else is
    written, and the next run writes nothing new and repeats the problems."""
    bad = TeamFactory(name="ML platform", slug="ml-platform")
    Team.objects.filter(pk=bad.pk).update(slug="ml_platform-emea")
    for key in ("mlp", "Vision_Dev"):
        team = bad if key == "mlp" else kube.teams["vision"]
        ClusterIdentity.objects.create(cluster=kube.cluster, key=key, team=team,
                                       kind=ClusterIdentity.Kind.K8S_NAMESPACE,
                                       valid_from=NOW.replace(year=2025))
    from tests.factories import ClusterIdentityFactory

    audio = TeamFactory(name="Audio", slug="audio")
    ClusterIdentityFactory(cluster=kube.cluster, key="audio", user=None, team=audio,
                           kind=ClusterIdentity.Kind.K8S_NAMESPACE)
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    kube.teams["ml"] = bad
    misnamed = kube.reserve("ml", kube.gpus["gpu-b"][:1])
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                           namespaces={"vision", "vision-dev", "speech", "mlp"}).start()
    try:
        kube.configure(server)
        first = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        written = {(r.method, r.path) for r in server.writes()}
        seen = len(server.requests)
        second = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        again = [r for r in server.requests[seen:] if r.method != "GET"]
        problems = dict(Problem.objects.filter(cluster=kube.cluster, status="open")
                        .values_list("summary", "occurrences"))
        server.namespaces.add("audio")  # the site creates the namespace
        third = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        still = set(Problem.objects.filter(cluster=kube.cluster, status="open")
                    .values_list("summary", flat=True))
    finally:
        server.stop()
    assert first.outcome == second.outcome == "partial"
    assert first.error.startswith("4 actions refused, the others applied; first ")
    assert len(problems) == 4 and set(problems.values()) == {2}
    ml = [p for p in problems if "Team 'ml_platform-emea'" in p]
    assert len(ml) == 2 and all("may hold only lower-case letters" in p for p in ml)
    assert any(p.startswith("create LocalQueue gq-vision/Vision_Dev: Team 'vision': Its "
                            "namespace 'Vision_Dev' may hold only") for p in problems)
    assert any(p.startswith("create LocalQueue gq-audio/audio: Could not create LocalQueue")
               and 'namespaces "audio" not found' in p for p in problems)
    kueue = "/apis/kueue.x-k8s.io/v1beta1"
    assert {("POST", f"{kueue}/clusterqueues"), ("POST", f"{kueue}/namespaces/vision/localqueues"),
            ("POST", f"{kueue}/namespaces/speech/localqueues")} <= written
    assert len([w for w in written if "validatingadmissionpolic" in w[1]]) == 2  # one each
    vision = next(o for o in server.items("ClusterQueue") if o["metadata"]["name"] == "gq-vision")
    assert vision["spec"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "vision", "vision-dev"]
    assert {o["metadata"]["name"] for o in server.items("ClusterQueue")} == {
        "gq-audio", "gq-speech", "gq-vision"}
    policy = server.items("ValidatingAdmissionPolicy")[0]
    queues = next(v for v in policy["spec"]["variables"] if v["name"] == "teamQueues")
    assert "Vision_Dev" not in queues["expression"] and "'mlp'" in queues["expression"]
    assert [(r.method, r.path) for r in again] == [
        ("POST", f"{kueue}/namespaces/audio/localqueues")]
    assert ReservationBinding.objects.get(reservation=reservation).level == "quota"
    held = ReservationBinding.objects.get(reservation=misnamed)
    assert held.level == "advisory" and held.why.startswith("A team slug may hold only")
    assert ReconcileRun.objects.filter(outcome="partial").count() == 3
    assert third.outcome == "partial" and third.error.startswith("3 actions refused")
    assert still == {p for p in problems if "audio" not in p}  # fixed, so resolved
    assert server.get("LocalQueue", "gq-audio", "audio") is not None
