"""An agent whose node has no working NVML (driver not loaded yet, an upgrade) keeps
reporting heartbeats with one node-level `nvml_unavailable` event: the node is marked from
that event's time until a sample ends after it (sample times decide, not arrival order),
and the fleet page and /metrics show it as a problem."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.inventory.models import Node
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    event,
    gpu_entry,
    new_gpu_uuid,
    recent_minute,
    sample,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def node_agent():
    issued = enrolled("gpu-node-07")
    agent = Agent(issued.key, Client())
    uuid = new_gpu_uuid()
    assert agent.post(batch(gpus=[gpu_entry(uuid)],
                            samples=[sample(uuid, recent_minute(30))])).status_code == 202
    return agent, issued.node, uuid


def down_since(node) -> object:
    return Node.objects.get(pk=node.pk).nvml_unavailable_since


def nvml_event(at):
    return event(None, at, type_="nvml_unavailable",
                 detail="NVML cannot start: Driver Not Loaded")


def test_the_outage_is_marked_from_its_event_until_a_later_sample(node_agent):
    agent, node, uuid = node_agent
    outage = recent_minute(20)
    assert agent.post(batch(events=[nvml_event(outage)])).status_code == 202
    assert down_since(node) == outage
    assert agent.post(batch()).status_code == 202  # heartbeats keep it
    # a spooled sample from before the outage, arriving late, does not end it
    assert agent.post(batch(samples=[sample(uuid, recent_minute(25))])).status_code == 202
    assert down_since(node) == outage
    # an earlier event of the same outage, arriving after, moves its start back
    assert agent.post(batch(events=[nvml_event(outage - timedelta(minutes=2))])).status_code \
        == 202
    assert down_since(node) == outage - timedelta(minutes=2)
    assert agent.post(batch(samples=[sample(uuid, recent_minute(5))])).status_code == 202
    assert down_since(node) is None


def test_a_batch_with_the_event_and_later_samples_is_a_recovery(node_agent):
    agent, node, uuid = node_agent
    assert agent.post(batch(events=[nvml_event(recent_minute(12))],
                            samples=[sample(uuid, recent_minute(10))])).status_code == 202
    assert down_since(node) is None


def test_the_fleet_page_and_metrics_show_it_as_a_problem(node_agent, client, roles, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"
    agent, node, _ = node_agent
    outage = recent_minute(20)
    agent.post(batch(events=[nvml_event(outage)]))
    client.force_login(roles.admin)
    body = client.get(reverse("fleet"), {"problems": "1"}).content.decode()
    assert 'data-node="gpu-node-07"' in body
    assert f"NVML unavailable since {outage:%Y-%m-%d %H:%M}" in body
    assert "1 without NVML" in body
    assert "gpuquota_nodes_nvml_unavailable 1.0" in client.get("/metrics").content.decode()

    agent.post(batch(samples=[sample(node_agent[2], recent_minute(5))]))
    body = client.get(reverse("fleet"), {"problems": "1"}).content.decode()
    assert 'data-node="gpu-node-07"' not in body and "NVML unavailable since" not in body
    assert "gpuquota_nodes_nvml_unavailable 0.0" in client.get("/metrics").content.decode()
