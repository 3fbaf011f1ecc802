"""API throttles per user (personal tokens and sessions, on the shared cache) and the
agent endpoint's 429 with Retry-After when a node sends faster than its limit."""

import json

import pytest
from django.core.cache import cache
from django.test import Client

from gpuquota.ingest.ratelimit import node_batch_wait_s
from tests.hardening.conftest import bearer_client
from tests.ingest.factories import batch, enrolled

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()  # counts live in the cache (this test run's Redis db), not the database
    yield
    cache.clear()


def test_a_token_over_its_rate_gets_429_with_retry_after(roles, settings):
    settings.API_THROTTLE_TOKEN_RATE = "3/min"
    client = bearer_client(roles.lead)
    assert [client.get("/api/v1/me").status_code for _ in range(3)] == [200] * 3
    response = client.get("/api/v1/me")
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert response.json()["code"] == "throttled"
    assert bearer_client(roles.member).get("/api/v1/me").status_code == 200  # per user


def test_sessions_have_their_own_rate(roles, settings):
    settings.API_THROTTLE_TOKEN_RATE = "1/min"
    settings.API_THROTTLE_SESSION_RATE = "2/min"
    token = bearer_client(roles.lead)
    assert token.get("/api/v1/me").status_code == 200
    assert token.get("/api/v1/me").status_code == 429
    session = Client()
    session.force_login(roles.lead)
    assert [session.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 429]


def test_a_rate_of_0_turns_the_throttle_off(roles, settings):
    settings.API_THROTTLE_TOKEN_RATE = "0"
    client = bearer_client(roles.lead)
    assert {client.get("/api/v1/me").status_code for _ in range(5)} == {200}


def _send(client, token: str):
    return client.post("/api/v1/agent/batches", data=json.dumps(batch()),
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.postgres
def test_a_node_faster_than_its_limit_gets_429_with_retry_after(settings):
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 2
    token = enrolled(hostname="fast-node").key
    client = Client()
    assert [_send(client, token).status_code for _ in range(2)] == [202, 202]
    response = _send(client, token)
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert response.json()["code"] == "throttled"
    assert _send(client, enrolled(hostname="calm-node").key).status_code == 202  # per node


def test_the_node_limit_counts_per_minute_window(settings):
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 2
    start = 1_800_000_000.0  # a window boundary (divisible by 60)
    assert node_batch_wait_s(node_id=7, now=start) is None
    assert node_batch_wait_s(node_id=7, now=start + 10) is None
    assert node_batch_wait_s(node_id=7, now=start + 15) == 45
    assert node_batch_wait_s(node_id=7, now=start + 60) is None  # the next window


def test_a_node_limit_of_0_is_no_limit(settings):
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 0
    assert all(node_batch_wait_s(node_id=8, now=1.0) is None for _ in range(50))
