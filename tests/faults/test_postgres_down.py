"""PostgreSQL unreachable (a TCP proxy in front of it, cut): the agent endpoint answers the
protocol's 503 with Retry-After, from the node token lookup on, never a 500; once the
database is back the agent's resend of the same batch is stored, once."""

import json
import urllib.error
import urllib.request

import pytest
from django.db import connection

from gpuquota.ingest.models import Sample
from tests.faults.conftest import TcpProxy, database_url, web_server
from tests.ingest.factories import batch, enrolled, gpu_entry, new_gpu_uuid, recent_minute, sample

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(180)]


@pytest.fixture
def postgres_proxy():
    db = connection.settings_dict
    proxy = TcpProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _post(url: str, token: str, body: dict) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        f"{url}/api/v1/agent/batches", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as refusal:
        return refusal.code, dict(refusal.headers), json.load(refusal)


def _one_sample_batch(minutes_ago: int) -> dict:
    gpu = new_gpu_uuid()
    return batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(minutes_ago))])


def test_postgres_unreachable_the_agent_gets_503_with_retry_after(postgres_proxy, tmp_path):
    token = enrolled(hostname="gpu-node-07").key
    env = {"DATABASE_URL": database_url(port=postgres_proxy.port), "REDIS_URL": "",
           "GPUQUOTA_MAIL_ENABLED": "0"}
    with web_server(env, tmp_path / "web.log") as url:
        assert _post(url, token, _one_sample_batch(3))[0] == 202  # through the proxy

        postgres_proxy.stop()  # the open connection dies, new ones are refused
        held = _one_sample_batch(2)
        for _attempt in range(2):  # the pooled connection's failure, then a refused connect
            status, headers, reply = _post(url, token, held)
            assert status == 503, reply
            assert headers["Retry-After"] == "30"
            assert reply["code"] == "unavailable" and "resend later" in reply["detail"]

        postgres_proxy.start()
        status, _headers, reply = _post(url, token, held)  # the agent's resend
        assert status == 202, reply
        assert _post(url, token, held)[0] == 200  # a duplicate, acknowledged, not stored again
    assert Sample.objects.count() == 2


def _get(url: str, path: str, *, method: str = "GET", headers: dict | None = None,
         body: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(
        f"{url}{path}", method=method, headers=headers or {},
        data=None if body is None else json.dumps(body).encode())
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as refusal:
        return refusal.code, dict(refusal.headers), refusal.read()


@pytest.fixture(scope="module")
def static_root(tmp_path_factory):
    """The static files as a production start collects them (DEBUG=0 reads the manifest)."""
    import os
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("static")
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": "collect", "ALLOWED_HOSTS": "localhost",
           "GPUQUOTA_MAIL_ENABLED": "0", "STATIC_ROOT": str(root)}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
                   env=env, check=True, timeout=300)
    return root


def test_postgres_unreachable_pages_and_the_api_answer_503_and_only_readiness_fails(
        postgres_proxy, static_root, tmp_path, settings):
    """As deployed (DEBUG=0): with the database cut, a signed-in page, the API (session and
    token, read and write) answer 503 with Retry-After and a short answer, never a 500;
    /healthz (liveness) stays 200, /readyz (readiness) is 503 until the database is back."""
    from django.test import Client

    from accounts.services import api_token_create
    from tests.factories import AdminFactory

    admin = AdminFactory()
    browser = Client()
    browser.force_login(admin)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    bearer = {"Authorization": f"Bearer {api_token_create(user=admin, name='ci')[1]}"}
    env = {"DATABASE_URL": database_url(port=postgres_proxy.port), "REDIS_URL": "",
           "GPUQUOTA_MAIL_ENABLED": "0", "DEBUG": "0", "SECRET_KEY": settings.SECRET_KEY,
           "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0",
           "STATIC_ROOT": str(static_root)}
    requests = [("/", cookie, None), ("/accounts/profile/", cookie, None),
                ("/api/v1/me", cookie, None), ("/api/v1/teams", bearer, None),
                ("/api/v1/reservations", bearer, {"team": "x", "gpu_class": "L4", "count": 1})]
    with web_server(env, tmp_path / "web.log") as url:
        assert [_get(url, path, headers=h)[0] for path, h, _ in requests[:4]] == [200] * 4
        status, _headers, body = _get(url, "/readyz")
        assert status == 200 and json.loads(body)["checks"]["database"] == "ok"

        postgres_proxy.stop()
        for path, headers, body in requests:
            status, answer_headers, answer = _get(url, path, headers=headers, body=body,
                                                  method="POST" if body else "GET")
            assert (status, answer_headers.get("Retry-After")) == (503, "30"), (path, answer)
            if path.startswith("/api/"):
                assert json.loads(answer) == {
                    "code": "unavailable", "detail": "The database is unavailable; retry in "
                    "a moment.", "errors": [{"field": None, "message": "The database is "
                                             "unavailable; retry in a moment."}]}
            else:
                assert answer_headers["Content-Type"].startswith("text/html")
                assert b"Unavailable for a moment" in answer and len(answer) < 3000
        assert _get(url, "/healthz")[:1] == (200,)
        status, headers, body = _get(url, "/readyz")
        assert (status, headers.get("Retry-After")) == (503, "30")
        assert json.loads(body) == {"ready": False, "checks": {
            "database": "unavailable: OperationalError",
            "broker": "none: tasks run in the web process"}}

        postgres_proxy.start()
        assert _get(url, "/readyz")[0] == 200
        assert _get(url, "/", headers=cookie)[0] == 200
    log = (tmp_path / "web.log").read_text()
    assert "Internal Server Error" not in log and " 500 " not in log
