"""Redis (the cache the API throttle counts in, and the Celery broker) stopped or frozen: the
API keeps answering. The throttle fails open with a warning (accounts/throttling.py) and
counts again once Redis is back; a change whose after-commit task cannot be queued is
still committed, its mail waiting in the outbox for the sweep."""

import logging
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.mail.models import MailDelivery
from gpuquota.reservations.models import Reservation
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu
from tests.hardening.conftest import bearer_client

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(120)]


@pytest.fixture
def cache_on(own_redis, settings):
    """The default cache on the test's own Redis, as settings.py configures it."""
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": own_redis.url,
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
    settings.API_THROTTLE_TOKEN_RATE = "3/min"
    return own_redis


def _statuses(client, count: int) -> list[int]:
    return [client.get("/api/v1/me").status_code for _ in range(count)]


def test_redis_stopped_the_api_answers_unthrottled_with_a_warning(cache_on, roles, caplog):
    client = bearer_client(roles.lead)
    assert _statuses(client, 4) == [200, 200, 200, 429]  # counted in Redis

    cache_on.stop()
    with caplog.at_level(logging.WARNING, logger="accounts.throttling"):
        assert _statuses(client, 5) == [200] * 5
    warnings = [r.getMessage() for r in caplog.records if r.name == "accounts.throttling"]
    assert len(warnings) <= 1 and all("throttling is off" in w for w in warnings)
    assert client.get("/api/v1/reservations").status_code == 200

    cache_on.start()  # back (empty): counting again
    assert _statuses(client, 4) == [200, 200, 200, 429]


def test_redis_frozen_the_api_answers_within_seconds(cache_on, roles):
    client = bearer_client(roles.lead)
    assert _statuses(client, 1) == [200]
    cache_on.freeze()
    try:
        began = time.monotonic()
        assert _statuses(client, 2) == [200, 200]
        assert time.monotonic() - began < 10  # a socket timeout per request, not a hang
    finally:
        cache_on.thaw()


def test_broker_stopped_a_change_through_the_api_is_committed(
        tasks_through_own_redis, roles, settings):

    settings.MAIL_ENABLED = True
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory()
    for index in range(4):
        make_gpu(node=node, gpu_class=gpu_class, index=index)
    QuotaFactory(team=roles.team, gpu_class=gpu_class, gpus=1)
    tasks_through_own_redis.stop()
    start = timezone.now().replace(microsecond=0) + timedelta(days=1)
    response = bearer_client(roles.lead).post(
        "/api/v1/reservations", {"team": "vision", "gpu_class": "H100-80GB", "count": 3,
                                 "start": start.isoformat(),
                                 "end": (start + timedelta(hours=2)).isoformat()},
        content_type="application/json")
    assert response.status_code == 201, response.content
    reservation = Reservation.objects.get(pk=response.json()["id"])
    assert reservation.status == "pending"  # over quota: the admins are to be told
    queued = MailDelivery.objects.filter(key__startswith=f"reservation:{reservation.pk}:")
    assert set(queued.values_list("status", flat=True)) == {"queued"}  # for the sweep
