"""Fleet figures of reclaim on the fleet page and in /metrics: reclaimable now,
reclaimed and saved this month, on a frozen clock."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from reclaim import lifecycle

pytestmark = pytest.mark.django_db


def stat(body: str, name: str) -> str:
    match = re.search(rf'data-stat="{name}"><div class="label">[^<]*</div>'
                      rf'<div class="value">([^<]*)<', body)
    assert match, name
    return match.group(1).strip()


def test_fleet_page_and_metrics_before_and_after_a_release(client, roles, fleet, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"  # the test client's address
    with time_machine.travel(fleet.now, tick=False):
        client.force_login(roles.member)
        body = client.get(reverse("fleet")).content.decode()
        # two idle GPUs (Vision's notebook, Speech's), 6 h left each at 2.50 USD/h
        assert stat(body, "reclaimable-gpu-hours") == "12.0"
        assert stat(body, "reclaimable-savings") == "30.00"
        assert stat(body, "reclaimed-gpu-hours") == "0.0"
        assert stat(body, "reclaim-saved") == "0.00"
        assert "2 idle or surplus GPUs" in body and 'href="/reclaim/"' not in body
        metrics = client.get("/metrics").content.decode()
        assert "gpuquota_reclaimable_gpus 2.0" in metrics
        assert 'gpuquota_reclaimable_savings{currency="USD"} 30.0' in metrics
        assert 'gpuquota_reclaim_recommendations{kind="reclaim",status="open"} 2.0' in metrics

        lifecycle.reservation_release_idle(reservation=fleet.reservations[0], actor=roles.lead)
    with time_machine.travel(fleet.now + timedelta(seconds=1), tick=False):
        client.force_login(roles.admin)
        body = client.get(reverse("fleet")).content.decode()
        assert stat(body, "reclaimable-gpu-hours") == "6.0"
        assert stat(body, "reclaimable-savings") == "15.00"
        assert stat(body, "reclaimed-gpu-hours") == "6.0"
        assert stat(body, "reclaim-saved") == "15.00"
        assert 'href="/reclaim/"' in body
        metrics = client.get("/metrics").content.decode()
        assert "gpuquota_reclaimed_gpu_hours_month 6.0" in metrics
        assert 'gpuquota_reclaim_saved_month{currency="USD"} 15.0' in metrics
        assert 'gpuquota_reclaim_recommendations{kind="reclaim",status="open"} 1.0' in metrics


def test_fleet_page_without_any_recommendation(client, roles, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"  # the test client's address
    client.force_login(roles.member)
    body = client.get(reverse("fleet")).content.decode()
    assert stat(body, "reclaimable-gpu-hours") == "0.0"
    assert stat(body, "reclaim-saved") == "0.00"
    metrics = client.get("/metrics").content.decode()
    assert "gpuquota_reclaimable_gpus 0.0" in metrics
