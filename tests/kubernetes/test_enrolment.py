"""Bootstrap enrolment: a cluster's secret enrols each node once, never reports, rotates;
end to end with the real agent against the live server on PostgreSQL."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from gpuquota.core.models import AuditEntry
from gpuquota.core.tokens import token_hash
from gpuquota.ingest.bootstrap import bootstrap_secret_revoke, bootstrap_secret_rotate
from gpuquota.ingest.models import BootstrapSecret, NodeToken, Sample
from gpuquota.ingest.selectors import node_for_token
from gpuquota.ingest.services import cluster_ensure, node_token_revoke
from gpuquota.inventory.models import Node
from tests.factories import AdminFactory, UserFactory

pytestmark = [pytest.mark.kubernetes]
ROOT = Path(settings.BASE_DIR)
ENROL = "/api/v1/agent/enrol"


def enrol(client: Client, secret: str, node_name: str):
    return client.post(ENROL, data=json.dumps({"node_name": node_name}),
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")


@pytest.fixture
def cluster(db):
    return cluster_ensure(name="kube-a")


@pytest.mark.django_db
def test_a_node_enrols_once_and_its_token_reports_but_the_secret_never_does(cluster):
    secret = bootstrap_secret_rotate(cluster=cluster, actor=AdminFactory())
    client = Client()
    answer = enrol(client, secret.key, "gpu-node-07.example")
    assert answer.status_code == 201, answer.content
    assert "no-store" in answer["Cache-Control"]
    body = answer.json()
    assert body["node"] == "gpu-node-07.example" and body["cluster"] == "kube-a"
    node = Node.objects.get(cluster=cluster, hostname="gpu-node-07.example")
    assert node_for_token(key=body["token"]) == node
    token = NodeToken.objects.get(node=node)
    assert token.enrolled_with.prefix == secret.prefix
    assert token.key_hash == token_hash(body["token"])
    assert AuditEntry.objects.filter(action="node.enrol_bootstrap", object_id=str(node.pk)).exists()

    replay = enrol(client, secret.key, "gpu-node-07.example")
    assert replay.status_code == 409 and "token" not in replay.json()
    assert replay.json()["errors"][0]["field"] == "node_name"
    assert NodeToken.objects.filter(node=node).count() == 1

    as_reporter = client.post("/api/v1/agent/batches", data=b"{}", content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {secret.key}")
    assert as_reporter.status_code == 401
    assert node_for_token(key=secret.key) is None


@pytest.mark.django_db
def test_a_revoked_node_stays_out_and_a_rotated_or_revoked_secret_is_refused(cluster):
    admin = AdminFactory()
    first = bootstrap_secret_rotate(cluster=cluster, actor=admin)
    client = Client()
    token = enrol(client, first.key, "n1").json()["token"]
    node_token_revoke(node=Node.objects.get(hostname="n1"), actor=admin)
    again = enrol(client, first.key, "n1")
    assert again.status_code == 403 and "revoked" in again.json()["detail"]
    assert node_for_token(key=token) is None

    second = bootstrap_secret_rotate(cluster=cluster, actor=admin)
    stale = enrol(client, first.key, "n2")
    assert stale.status_code == 401 and stale["WWW-Authenticate"].startswith("Bearer")
    assert not Node.objects.filter(hostname="n2").exists()
    assert enrol(client, second.key, "n2").status_code == 201
    assert BootstrapSecret.objects.filter(cluster=cluster, revoked_at__isnull=True).count() == 1

    assert bootstrap_secret_revoke(cluster=cluster, actor=admin) == 1
    assert enrol(client, second.key, "n3").status_code == 401
    assert AuditEntry.objects.filter(action="cluster.bootstrap_revoke").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field"), [
    ({"node_name": "Not A DNS Name"}, "node_name"),
    ({"node_name": "x" * 254}, "node_name"),
    ({"node": "n1"}, "node_name"),
    ([], "node_name"),
])
def test_bad_enrolment_bodies_name_the_field(cluster, body, field):
    secret = bootstrap_secret_rotate(cluster=cluster, actor=None)
    answer = Client().post(ENROL, data=json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {secret.key}")
    assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == field
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_missing_credentials_and_a_node_token_cannot_enrol(cluster):
    client = Client()
    assert client.post(ENROL, data="{}", content_type="application/json").status_code == 401
    secret = bootstrap_secret_rotate(cluster=cluster, actor=None)
    node_token = enrol(client, secret.key, "n1").json()["token"]
    assert enrol(client, node_token, "n9").status_code == 401


@pytest.mark.django_db
def test_the_bootstrap_page_is_for_admins_shows_the_secret_once_and_is_never_cached(cluster):
    url = reverse("ingest_cluster_bootstrap", args=[cluster.slug])
    member = Client()
    member.force_login(UserFactory())
    assert member.get(url).status_code in (403, 404)
    assert member.post(reverse("ingest_cluster_bootstrap_rotate",
                               args=[cluster.slug])).status_code in (403, 404)
    assert not BootstrapSecret.objects.exists()

    client = Client()
    client.force_login(AdminFactory())
    rotated = client.post(reverse("ingest_cluster_bootstrap_rotate", args=[cluster.slug]))
    assert rotated.status_code == 302 and "no-store" in rotated["Cache-Control"]
    page = client.get(url)
    assert "no-store" in page["Cache-Control"]
    live = BootstrapSecret.objects.get(cluster=cluster, revoked_at__isnull=True)
    html = page.content.decode()
    assert 'id="new-secret-key"' in html and live.prefix in html
    key = html.split('id="new-secret-key">')[1].split("<")[0]
    assert token_hash(key) == live.key_hash
    assert 'id="new-secret-key"' not in client.get(url).content.decode()  # once
    nodes = client.get(reverse("ingest_nodes")).content.decode()
    assert url in nodes


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_the_agent_enrols_itself_then_reports_with_its_own_token(transactional_db, live_server,
                                                                  tmp_path):
    cluster = cluster_ensure(name="kube-e2e")
    secret = bootstrap_secret_rotate(cluster=cluster, actor=AdminFactory())
    bootstrap_file = tmp_path / "bootstrap-token"
    bootstrap_file.write_text(secret.key + "\n")
    token_file = tmp_path / "node" / "agent.token"

    def agent_once(node_name: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "agent", "--simulate", "1", "--once", "--server",
             live_server.url, "--token-file", str(token_file), "--bootstrap-file",
             str(bootstrap_file), "--window", "10", "--poll", "1", "--send-jitter", "0",
             "--hostname", node_name, "--spool-dir", str(tmp_path / "spool")],
            cwd=ROOT, capture_output=True, text=True, timeout=60)

    result = agent_once("gpu-node-01")
    assert result.returncode == 0, result.stderr[-2000:]
    assert token_file.stat().st_mode & 0o077 == 0
    node = Node.objects.get(cluster=cluster, hostname="gpu-node-01")
    assert node_for_token(key=token_file.read_text().strip()) == node
    assert Sample.objects.filter(gpu__node=node).exists()

    # A second start keeps its token: no new enrolment, no new token.
    assert agent_once("gpu-node-01").returncode == 0
    assert NodeToken.objects.filter(node=node).count() == 1

    # Its token lost, a replayed enrolment is refused with the reason, and nothing is issued.
    token_file.unlink()
    replay = agent_once("gpu-node-01")
    assert replay.returncode == 2 and "409" in replay.stderr and "already enrolled" in replay.stderr
    assert not token_file.exists() and NodeToken.objects.filter(node=node).count() == 1

    # A revoked secret enrols nothing.
    bootstrap_secret_revoke(cluster=cluster, actor=None)
    refused = agent_once("gpu-node-02")
    assert refused.returncode == 2 and "401" in refused.stderr
    assert not Node.objects.filter(hostname="gpu-node-02").exists()
