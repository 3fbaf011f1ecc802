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
