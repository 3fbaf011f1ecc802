"""The sources' pages and API: admins only, every change audited, the secret write-only
(never in a page, an answer or the audit log), bad input a 4xx naming the field; the
fleet page shows each source's nodes; /metrics its lag and state."""

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import Gpu
from gpuquota.telemetry.models import SourceGpu, TelemetrySource
from gpuquota.telemetry.secrets import secret_open
from tests.factories import make_gpu

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-t0ken-never-shown"


def _client(user) -> Client:
    client = Client()
    if user.is_authenticated:
        client.force_login(user)
    return client


def _body(cluster, **extra) -> dict:
    return {"name": "prom-a", "cluster": cluster.slug, "kind": "prometheus",
            "base_url": "https://prometheus.example.org", "auth": "bearer",
            "secret": SECRET, "selector": 'job="dcgm-exporter"', **extra}


@pytest.mark.parametrize("role", ["lead", "other_lead", "member", "outsider", "anonymous"])
def test_only_admins_see_or_change_sources(roles, role, cluster):
    client = _client(roles.users()[role])
    assert client.get(reverse("telemetry_sources")).status_code in (302, 404)
    answer = client.post(reverse("api_telemetry_sources"), _body(cluster),
                         content_type="application/json")
    assert answer.status_code in (401, 403)
    assert not TelemetrySource.objects.exists()


def test_the_secret_is_write_only_and_changes_are_audited(roles, cluster):
    client = _client(roles.admin)
    answer = client.post(reverse("api_telemetry_sources"), _body(cluster),
                         content_type="application/json")
    assert answer.status_code == 201, answer.json()
    assert SECRET not in answer.content.decode() and answer.json()["secret_prefix"] == "s3cr"
    source = TelemetrySource.objects.get()
    assert SECRET not in source.secret_encrypted and secret_open(source.secret_encrypted) == SECRET
    page = client.get(reverse("telemetry_sources")).content.decode()
    edit = client.get(reverse("telemetry_source_edit", args=[source.pk])).content.decode()
    assert "prom-a" in page and SECRET not in page and SECRET not in edit
    patched = client.patch(reverse("api_telemetry_source", args=[source.pk]),
                           {"interval_s": 120}, content_type="application/json")
    assert patched.status_code == 200 and patched.json()["interval_s"] == 120
    assert secret_open(TelemetrySource.objects.get().secret_encrypted) == SECRET  # kept
    entries = AuditEntry.objects.filter(object_type="telemetry.telemetrysource")
    assert [e.action for e in entries.order_by("id")] == [
        "telemetry.source_create", "telemetry.source_save"]
    assert SECRET not in str([e.changes for e in entries])
    assert entries.order_by("id").last().changes == {"interval_s": [60, 120]}


@pytest.mark.parametrize(("extra", "field"), [
    ({"selector": '}) or vector(1'}, "selector"),
    ({"window_s": 7}, "window_s"),
    ({"kind": "exporter", "urls": ""}, "urls"),
    ({"kind": "exporter", "urls": "ftp://x/metrics"}, "urls"),
    ({"auth": "basic", "username": ""}, "username"),
    ({"kind": "nonsense"}, "kind"),
])
def test_bad_input_is_a_400_naming_the_field(roles, cluster, extra, field):
    answer = _client(roles.admin).post(reverse("api_telemetry_sources"), _body(cluster, **extra),
                                       content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert field in {error["field"] for error in answer.json()["errors"]}
    assert not TelemetrySource.objects.exists()


def test_the_form_adds_a_source_and_shows_a_problem(roles, cluster):
    client = _client(roles.admin)
    answer = client.post(reverse("telemetry_sources"), {
        "name": "direct", "cluster": cluster.pk, "kind": "exporter",
        "urls": "http://127.0.0.1:9/metrics", "auth": "none", "node_label": "Hostname",
        "interval_s": 10, "scrape_interval_s": 10, "window_s": 60, "delay_s": 0,
        "enabled": "on", "tls_verify": "on"})
    assert answer.status_code == 302
    source = TelemetrySource.objects.get()
    pulled = client.post(reverse("telemetry_source_pull", args=[source.pk]), follow=True)
    assert "cannot connect" in pulled.content.decode()
    assert "failing" in client.get(reverse("telemetry_sources")).content.decode()
    home = client.get("/").content.decode()
    assert "Failing telemetry sources" in home


def test_the_fleet_page_names_each_nodes_source(roles, cluster):
    source = TelemetrySource.objects.create(name="prom-a", cluster=cluster, kind="prometheus",
                                            base_url="http://prometheus:9090")
    gpu = make_gpu()
    SourceGpu.objects.create(source=source, gpu=gpu, util_metric="DCGM_FI_DEV_GPU_UTIL")
    page = _client(roles.member).get(reverse("fleet")).content.decode()
    assert 'id="telemetry-sources"' in page and gpu.node.hostname in page
    assert "DCGM_FI_DEV_GPU_UTIL" in page
    assert Gpu.objects.count() == 1


def test_metrics_show_lag_and_state(cluster):
    from gpuquota.usage.metrics import metrics_render

    TelemetrySource.objects.create(name="prom-a", cluster=cluster, kind="prometheus",
                                   base_url="http://prometheus:9090", last_error="boom")
    text = metrics_render().decode()
    assert 'gpuquota_telemetry_source_up{cluster="kube-a",source="prom-a"} 0.0' in text
