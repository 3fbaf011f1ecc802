"""/metrics answers only to the configured bearer token or allowed networks; off by
default in production (DEBUG=0), loopback only by default in development."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _production(settings, monkeypatch):
    settings.DEBUG = False
    for name in ("METRICS_TOKEN", "METRICS_ALLOWED_NETWORKS"):
        monkeypatch.delenv(name, raising=False)


def test_off_by_default_in_production():
    assert Client().get("/metrics").status_code == 404


def test_loopback_by_default_in_development(settings):
    settings.DEBUG = True
    assert Client().get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 403


def test_the_bearer_token(settings):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    response = Client().get("/metrics")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert Client(HTTP_AUTHORIZATION="Bearer wrong").get("/metrics").status_code == 401
    response = Client(HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").get("/metrics")
    assert response.status_code == 200 and b"gpuquota_gpus_failed" in response.content


def test_allowed_networks(settings):
    settings.METRICS_ALLOWED_NETWORKS = "10.0.0.0/8, 192.168.1.7"
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.168.1.7").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.168.1.8").get("/metrics").status_code == 403
    assert Client().get("/metrics").status_code == 403  # 127.0.0.1 is not listed


def test_networks_from_the_environment(monkeypatch):
    monkeypatch.setenv("METRICS_ALLOWED_NETWORKS", "127.0.0.1/32")
    assert Client().get("/metrics").status_code == 200
