"""Agents and server (docs/operations.md, "Agents and server"): the server takes batches from
agents not older than MIN_AGENT_VERSION; an older agent is answered 422 with the versions,
keeps its batches spooled, and delivers them once upgraded."""

import logging
import random
from datetime import UTC, datetime

import pytest
import time_machine

import agent
import agent.runner
from agent.owners import OwnerResolver
from agent.runner import Agent
from agent.sender import Sender, TokenFile
from agent.simulator import Simulator
from agent.spool import Spool
from gpuquota.ingest import conf
from gpuquota.ingest.models import AgentBatch, Sample
from gpuquota.ingest.services import node_enrol
from tests.agent.conftest import FakeClock
from tests.factories import ClusterFactory
from tests.ingest.factories import batch, gpu_entry, new_gpu_uuid, recent_minute, sample

NOW = datetime(2027, 5, 4, 12, 0, tzinfo=UTC)
WINDOW_S = 60


def _old_agent(monkeypatch, version: str) -> None:
    """This process's agent code, reporting itself as `version` (an agent not yet upgraded)."""
    monkeypatch.setattr(agent.runner, "__version__", version)


@pytest.mark.django_db
@pytest.mark.parametrize("version", ["0.9.0", "0.9.9rc1"])
def test_an_agent_older_than_the_minimum_is_422_with_the_versions(version):
    issued = node_enrol(cluster=ClusterFactory(), hostname="gpu-node-07", actor=None)
    body = batch(gpus=[gpu_entry(new_gpu_uuid())])
    body["node"]["agent_version"] = version
    body["samples"] = [sample(body["gpus"][0]["uuid"], recent_minute())]
    from django.test import Client
    response = Client().post("/api/v1/agent/batches", data=body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {issued.key}")
    assert response.status_code == 422
    answer = response.json()
    assert answer["code"] == "agent_too_old"
    assert answer["min_agent_version"] == conf.MIN_AGENT_VERSION == "1.0.0"
    assert answer["server_version"] == agent.__version__
    assert f"agent {version} is older" in answer["detail"]
    assert answer["errors"] == [{"field": "node.agent_version", "message": "at least 1.0.0"}]
    assert not Sample.objects.exists() and not AgentBatch.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("version", ["1.0.0", "1.4.2", "2.0.0", "dcgm-bridge", ""])
def test_agents_from_the_minimum_on_and_other_sources_are_taken(version):
    issued = node_enrol(cluster=ClusterFactory(), hostname="gpu-node-07", actor=None)
    body = batch()
    body["node"]["agent_version"] = version
    from django.test import Client
    response = Client().post("/api/v1/agent/batches", data=body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {issued.key}")
    assert response.status_code == 202


@pytest.mark.django_db(transaction=True)
def test_an_old_agent_keeps_its_batches_and_delivers_them_once_upgraded(
        live_server, tmp_path, monkeypatch, caplog):
    issued = node_enrol(cluster=ClusterFactory(), hostname="n1", actor=None)
    token_file = tmp_path / "token"
    token_file.write_text(issued.key)
    token_file.chmod(0o600)
    _old_agent(monkeypatch, "0.9.0")
    with time_machine.travel(NOW, tick=False):
        clock = FakeClock(start=NOW.timestamp())
        spool = Spool(tmp_path / "spool", clock=clock.now)
        node = Agent(backend=Simulator(2, seed=7, hostname="n1", clock=clock.now), spool=spool,
                     owners=OwnerResolver(str(tmp_path / "proc")), hostname="n1",
                     boot_id="boot-1", window_s=WINDOW_S, clock=clock)
        sender = Sender(spool=spool, server=live_server.url, token=TokenFile(str(token_file)),
                        ca_file=None, clock=clock.now, node_status=node.node_status,
                        rng=random.Random(3), timeout_s=10)
        node.start()
        clock.t -= 3 * WINDOW_S
        for _ in range(2):
            start = int(clock.t)
            clock.t += WINDOW_S
            node.poll()
            node.close_window(start, start + WINDOW_S)
        with caplog.at_level(logging.ERROR, logger="agent.sender"):
            outcome = sender.send(spool.pending()[0])
        assert not outcome.delivered and outcome.slow  # retried slowly, as for a rolling upgrade
        assert "older than this server" in caplog.text and "at least 1.0.0" in caplog.text
        assert len(spool.pending()) == 2 and not Sample.objects.exists()
        _old_agent(monkeypatch, agent.__version__)  # the upgrade: same spool, a new agent
        assert sender.drain(lambda _s: True)
    assert spool.pending() == []
    assert Sample.objects.count() == 4  # two windows of two GPUs
    assert set(AgentBatch.objects.values_list("node__agent_version", flat=True)) == {"1.0.0"}
