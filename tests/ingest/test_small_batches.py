"""An agent's steady-state batch (a window of a node's GPUs) in few statements: the
receipt, the node's row, the boot's lookup, the GPUs' read and their last_seen_at in one
(`batches._batch_claim`), the token's node read
without a query set (`selectors.node_for_token`), and the node's rate counted in one
round trip to Redis (`ratelimit._count`)."""

from datetime import timedelta

import pytest
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from django.test import Client
from django.urls import reverse

from gpuquota.ingest.models import NodeBoot, Sample
from gpuquota.ingest.ratelimit import _redis, node_batch_wait_s
from gpuquota.ingest.selectors import node_for_token
from gpuquota.inventory.models import Gpu, Node
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    gpu_entry,
    new_gpu_uuid,
    recent_minute,
    sample,
)

pytestmark = pytest.mark.django_db

@pytest.mark.postgres
def test_a_steady_state_batch_takes_six_statements(clock):
    agent, gpus = Agent(enrolled().key, Client()), [new_gpu_uuid() for _ in range(8)]
    listed = [gpu_entry(gpu, index=i) for i, gpu in enumerate(gpus)]
    minute = recent_minute(5)
    body = batch(gpus=listed, samples=[sample(gpu, minute) for gpu in gpus])
    agent.post(body)  # the first batch registers the GPUs and the boot, makes the partition
    minute += timedelta(minutes=1)
    clock.shift(timedelta(seconds=30))  # the next batch: its GPUs seen at a later instant
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(sql.split()[0])
        return execute(sql, params, many, context)

    again = batch(gpus=listed, samples=[sample(gpu, minute) for gpu in gpus])
    again["node"]["boot_id"] = body["node"]["boot_id"]
    with connection.execute_wrapper(count):
        answer = agent.post(again)
    assert answer.status_code == 202 and answer.json()["samples"]["stored"] == 8
    # token; receipt + node + boot + the GPUs read and seen; the samples' COPY (not
    # counted) at a savepoint; outbox marks; the answer kept for a replay. (The batch's
    # transaction is a savepoint too inside the test's.)
    assert statements == ["SELECT", "SAVEPOINT", "WITH", "SAVEPOINT", "RELEASE", "INSERT",
                          "UPDATE", "RELEASE"]
    assert Sample.objects.filter(gpu__uuid__in=gpus).count() == 16


def test_a_replay_leaves_the_node_alone_and_a_boot_is_found_again(clock):
    issued = enrolled()
    agent, gpu = Agent(issued.key, Client()), new_gpu_uuid()
    body = batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(3))])
    assert agent.post(body).status_code == 202
    first_seen = Node.objects.get(pk=issued.node.pk).last_seen_at
    clock.shift(timedelta(seconds=20))
    body["node"]["agent_version"] = "1.0.1"  # a replay is answered, never stored again
    assert agent.post(body).status_code == 200
    node = Node.objects.get(pk=issued.node.pk)
    assert (node.last_seen_at, node.agent_version) == (first_seen, "1.0.0")
    assert Gpu.objects.get(uuid=gpu).last_seen_at == first_seen
    later = batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(2))])
    later["node"]["boot_id"] = body["node"]["boot_id"]
    assert agent.post(later).status_code == 202
    node.refresh_from_db()
    assert node.last_seen_at == first_seen + timedelta(seconds=20)
    assert node.agent_version == "1.0.0"
    assert NodeBoot.objects.filter(node=node).count() == 1
    boot = NodeBoot.objects.get(node=node)
    assert set(Sample.objects.filter(gpu__uuid=gpu).values_list("boot_id", flat=True)) == {
        boot.pk}


def test_gpus_are_seen_at_every_batch_and_another_nodes_gpu_is_not(clock):
    issued, other = enrolled(), enrolled("gpu-node-08")
    agent, neighbour = Agent(issued.key, Client()), Agent(other.key, Client())
    mine, theirs = new_gpu_uuid(), new_gpu_uuid()
    neighbour.post(batch(gpus=[gpu_entry(theirs)]))
    agent.post(batch(gpus=[gpu_entry(mine)]))
    theirs_seen = Gpu.objects.get(uuid=theirs).last_seen_at
    clock.shift(timedelta(seconds=30))
    answer = agent.post(batch(gpus=[gpu_entry(mine)], samples=[
        sample(mine, recent_minute(2)), sample(theirs, recent_minute(2))])).json()
    assert answer["samples"]["stored"] == 1 and answer["rejected"] != []
    assert Gpu.objects.get(uuid=mine).last_seen_at == clock.now
    assert Gpu.objects.get(uuid=theirs).last_seen_at == theirs_seen
    clock.shift(timedelta(seconds=30))  # a listed property changed: refreshed, and seen
    agent.post(batch(gpus=[gpu_entry(mine, index=3)], samples=[sample(mine, recent_minute(1))]))
    gpu = Gpu.objects.get(uuid=mine)
    assert (gpu.index, gpu.last_seen_at) == (3, clock.now)


def test_the_tokens_node_is_the_node_as_the_orm_reads_it():
    issued = enrolled()
    agent, gpu = Agent(issued.key, Client()), new_gpu_uuid()
    agent.post(batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute())]))
    Node.objects.filter(pk=issued.node.pk).update(nvml_unavailable_since=recent_minute(5))
    found, stored = node_for_token(key=issued.key), Node.objects.get(pk=issued.node.pk)
    assert [getattr(found, f.attname) for f in Node._meta.concrete_fields] == [
        getattr(stored, f.attname) for f in Node._meta.concrete_fields]
    assert found.last_seen_at.tzinfo is not None and not found._state.adding
    assert node_for_token(key=issued.key + "x") is None


@pytest.mark.redis
def test_a_nodes_rate_is_one_redis_key_that_expires_after_its_window(settings):
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 2
    backend, start = caches["default"], 1_800_000_000.0  # a window boundary
    assert isinstance(backend, RedisCache)
    name = f"ingest_rate_977_{int(start // 60)}"
    cache.delete(name)
    assert node_batch_wait_s(node_id=977, now=start) is None
    key = backend.make_and_validate_key(name)
    assert 110 <= _redis(settings.CACHES["default"]).ttl(key) <= 120 and cache.get(name) == 1
    assert node_batch_wait_s(node_id=977, now=start + 1) is None
    assert node_batch_wait_s(node_id=977, now=start + 2) == 58
    assert cache.get(name) == 3
    cache.delete(name)


def test_a_node_is_let_through_when_redis_cannot_count(settings):
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 1
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}
    assert isinstance(caches["default"], RedisCache)
    assert [node_batch_wait_s(node_id=978, now=1.0) for _ in range(3)] == [None] * 3


def test_the_endpoint_skips_the_browsers_middleware_and_its_500_is_still_json(
        settings, monkeypatch):
    settings.DEBUG = False
    issued, gpu = enrolled(), new_gpu_uuid()
    agent = Agent(issued.key, Client(raise_request_exception=False))
    answer = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(2))]))
    assert answer.status_code == 202
    assert "Content-Security-Policy" not in answer and "Set-Cookie" not in answer
    assert "Content-Security-Policy" in Client().get(reverse("login"))  # pages keep theirs

    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("gpuquota.ingest.views.batch_ingest", broken)
    failed = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, recent_minute(1))]))
    assert failed.status_code == 500 and failed.json()["code"] == "server_error"
    assert "a bug" not in failed.content.decode()
