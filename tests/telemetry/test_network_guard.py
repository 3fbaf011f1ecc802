"""Where a source may connect (issue 29, SSRF): loopback, link-local and private addresses
are refused in every spelling and behind names, unless TELEMETRY_ALLOWED_NETWORKS lists
them; a redirect to another host or port is not followed; an upstream answer is described,
never quoted; credentials in a URL are refused."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.services import source_pull

pytestmark = pytest.mark.django_db

SECRET = "internal-secret-42"


@pytest.fixture(autouse=True)
def _nothing_allowed(monkeypatch):
    monkeypatch.delenv("TELEMETRY_ALLOWED_NETWORKS", raising=False)


class Upstream:
    """A loopback HTTP server answering `answer(path)` -> (status, headers, body), and
    counting the requests it got."""

    def __init__(self, answer):
        self.hits: list[str] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                upstream.hits.append(self.path)
                status, headers, body = answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstreams():
    started = []

    def start(answer):
        started.append(Upstream(answer))
        return started[-1]

    yield start
    for upstream in started:
        upstream.stop()


def _admin_client(roles) -> Client:
    client = Client()
    client.force_login(roles.admin)
    return client


@pytest.mark.parametrize(("field", "url"), [
    ("base_url", "http://127.0.0.1:5432"),
    ("base_url", "http://169.254.169.254/latest/meta-data"),
    ("base_url", "http://[::1]:9090"),
    ("base_url", "http://2130706433:9090"),  # 127.0.0.1 as one decimal number
    ("base_url", "http://0177.0.0.1:9090"),  # octal
    ("base_url", "http://0x7f.1:9090"),
    ("base_url", "http://[::ffff:127.0.0.1]:9090"),
    ("base_url", "http://localhost:9090"),  # a name resolving to loopback
    ("base_url", "http://10.0.0.5:9090"),
    ("base_url", "http://192.168.1.10:9090"),
    ("base_url", "http://admin:hunter2@prometheus.example.org:9090"),
    ("urls", "http://127.0.0.1:9400/metrics"),
    ("urls", "http://u:p@dcgm.example.org:9400/metrics"),
])
def test_the_api_refuses_a_source_that_reaches_inside(roles, cluster, field, url):
    body = {"name": "inside", "cluster": cluster.slug, "kind": "prometheus",
            "base_url": url} if field == "base_url" else {
        "name": "inside", "cluster": cluster.slug, "kind": "exporter", "urls": url}
    answer = _admin_client(roles).post(reverse("api_telemetry_sources"), body,
                                       content_type="application/json")
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    assert field in {error["field"] for error in errors}
    assert "hunter2" not in answer.content.decode()
    assert not TelemetrySource.objects.exists()


def test_the_form_says_why(roles, cluster):
    page = _admin_client(roles).post(reverse("telemetry_sources"), {
        "name": "meta", "cluster": cluster.pk, "kind": "prometheus",
        "base_url": "http://169.254.169.254", "auth": "none", "node_label": "Hostname",
        "interval_s": 60, "scrape_interval_s": 30, "window_s": 60, "delay_s": 60,
        "enabled": "on", "tls_verify": "on"})
    assert page.status_code == 200 and "link-local" in page.content.decode()
    assert not TelemetrySource.objects.exists()


def test_allowed_networks_open_what_the_site_lists(roles, cluster, monkeypatch):
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", "127.0.0.1/32")
    answer = _admin_client(roles).post(reverse("api_telemetry_sources"), {
        "name": "local", "cluster": cluster.slug, "kind": "prometheus",
        "base_url": "http://127.0.0.1:9090"}, content_type="application/json")
    assert answer.status_code == 201, answer.content
    refused = _admin_client(roles).post(reverse("api_telemetry_sources"), {
        "name": "other", "cluster": cluster.slug, "kind": "prometheus",
        "base_url": "http://127.0.0.2:9090"}, content_type="application/json")
    assert refused.status_code == 400


def test_a_pull_never_connects_where_the_guard_refuses(upstreams, cluster):
    """A source saved before the rule (or whose name now resolves inside) is checked where
    the connection is opened: the internal service never sees a request."""
    inside = upstreams(lambda path: (200, {"Content-Type": "application/json"},
                                     b'{"status":"success"}'))
    source = TelemetrySource.objects.create(  # written around the save-time check
        name="old", cluster=cluster, kind="prometheus",
        base_url=f"http://localhost:{inside.port}")
    assert source_pull(source=source, now=timezone.now()) is None
    source.refresh_from_db()
    assert inside.hits == []
    assert "refused" in source.last_error and "loopback" in source.last_error


def test_a_redirect_to_another_port_is_not_followed(upstreams, cluster, monkeypatch):
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", "127.0.0.1/32")
    target = upstreams(lambda path: (200, {"Content-Type": "text/plain"}, SECRET.encode()))
    redirector = upstreams(lambda path: (
        302, {"Location": f"http://127.0.0.1:{target.port}/metrics"}, b""))
    source = TelemetrySource.objects.create(
        name="hop", cluster=cluster, kind="exporter",
        urls=f"http://127.0.0.1:{redirector.port}/metrics")
    source_pull(source=source, now=timezone.now())
    source.refresh_from_db()
    assert redirector.hits and target.hits == []
    assert "redirected to another host or port" in source.last_error


def test_a_redirect_on_the_same_host_and_port_is_followed(upstreams, cluster, monkeypatch):
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", "127.0.0.1/32")
    exporter = upstreams(lambda path: (
        (302, {"Location": "/metrics"}, b"") if path == "/old" else
        (200, {"Content-Type": "text/plain"}, b"# no GPUs here\n")))
    source = TelemetrySource.objects.create(
        name="moved", cluster=cluster, kind="exporter",
        urls=f"http://127.0.0.1:{exporter.port}/old")
    source_pull(source=source, now=timezone.now())
    source.refresh_from_db()
    assert exporter.hits == ["/old", "/metrics"] and source.last_error == ""


@pytest.mark.parametrize(("status", "kind", "body"), [
    (500, "text/html", f"<h1>{SECRET}</h1>".encode()),
    (200, "application/json", f'{{"status":"error","errorType":"x","error":"{SECRET}"}}'
     .encode()),
    (200, "application/json", f'{{"status":"error","error":"{SECRET}"}}'.encode()),
    (200, "text/plain", f"not json {SECRET}".encode()),
    (200, "application/json", (f'{{"status":"success","data":{{"resultType":"matrix",'
                               f'"result":[{{"metric":{{}},"values":[[1,"{SECRET}"]]}}]}}}}')
     .encode()),
])
def test_an_upstream_answer_is_described_never_quoted(upstreams, cluster, monkeypatch, roles,
                                                      status, kind, body):
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", "127.0.0.1/32")
    upstream = upstreams(lambda path: (status, {"Content-Type": kind}, body))
    source = TelemetrySource.objects.create(name="leaky", cluster=cluster, kind="prometheus",
                                            base_url=f"http://127.0.0.1:{upstream.port}")
    source_pull(source=source, now=timezone.now())
    source.refresh_from_db()
    assert source.last_error and SECRET not in source.last_error
    if status == 500:
        assert f"answered 500 (text/html, {len(body)} bytes)" in source.last_error
    client = _admin_client(roles)
    for page in (client.get(reverse("telemetry_sources")),
                 client.get(reverse("api_telemetry_source", args=[source.pk])),
                 client.get(reverse("fleet"))):
        assert SECRET not in page.content.decode()


def test_an_exporter_answer_is_not_quoted_either(upstreams, cluster, monkeypatch):
    monkeypatch.setenv("TELEMETRY_ALLOWED_NETWORKS", "127.0.0.1/32")
    upstream = upstreams(lambda path: (200, {"Content-Type": "text/plain"},
                                       f"DCGM_FI_DEV_GPU_UTIL{{ {SECRET}\n".encode()))
    source = TelemetrySource.objects.create(name="junk", cluster=cluster, kind="exporter",
                                            urls=f"http://127.0.0.1:{upstream.port}/metrics")
    source_pull(source=source, now=timezone.now())
    source.refresh_from_db()
    assert "not Prometheus exposition text" in source.last_error
    assert SECRET not in source.last_error
