"""Identities and batch ids: nothing is stored twice; replays get the first answer."""

import json
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from gpuquota.ingest.models import AgentBatch, GpuEvent, ProcessRecord, Sample
from gpuquota.outbox.models import DirtyGpuHour
from tests.helpers import run_concurrently
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    event,
    gpu_entry,
    new_gpu_uuid,
    process,
    recent_minute,
    sample,
)


def full_batch(gpu: str, minutes: int = 3):
    starts = [recent_minute(m) for m in range(2, 2 + minutes)]
    return batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, s) for s in starts],
                 processes=[process(gpu, s) for s in starts],
                 events=[event(gpu, starts[0]), event(None, starts[0], type_="agent_restart")])


@pytest.mark.django_db
def test_replay_returns_200_and_the_first_body():
    agent = Agent(enrolled().key, Client())
    body = full_batch(new_gpu_uuid())
    body["samples"][0]["util_gpu_avg"] = 150.0  # nulled: part of the first answer
    first = agent.post(body)
    assert first.status_code == 202
    replay = agent.post(body)
    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert Sample.objects.count() == 3 and AgentBatch.objects.count() == 1


@pytest.mark.django_db
def test_same_batch_id_from_another_node_is_its_own_batch():
    gpu_a, gpu_b = new_gpu_uuid(), new_gpu_uuid()
    body_a = full_batch(gpu_a)
    body_b = full_batch(gpu_b)
    body_b["batch_id"] = body_a["batch_id"]
    assert Agent(enrolled("a").key, Client()).post(body_a).status_code == 202
    assert Agent(enrolled("b").key, Client()).post(body_b).status_code == 202
    assert Sample.objects.count() == 6


@pytest.mark.django_db
def test_same_records_under_a_new_batch_id_are_duplicates():
    agent = Agent(enrolled().key, Client())
    body = full_batch(new_gpu_uuid())
    agent.post(body)
    body["batch_id"] = str(uuid.uuid4())
    response = agent.post(body)
    assert response.status_code == 202
    counts = response.json()
    assert counts["samples"] == {"stored": 0, "duplicates": 3, "conflicts": 0}
    assert counts["processes"] == {"stored": 0, "duplicates": 3, "conflicts": 0}
    assert counts["events"] == {"stored": 0, "duplicates": 2, "conflicts": 0}
    assert Sample.objects.count() == 3 and ProcessRecord.objects.count() == 3
    assert GpuEvent.objects.count() == 2


@pytest.mark.django_db
def test_resend_with_different_values_is_a_conflict_and_first_stored_wins():
    agent = Agent(enrolled().key, Client())
    body = full_batch(new_gpu_uuid())
    agent.post(body)
    body["batch_id"] = str(uuid.uuid4())
    body["samples"][0]["util_gpu_avg"] = 12.0
    body["samples"][1]["readings"] = 5
    body["processes"][0]["command"] = "torchrun"
    body["events"][0]["detail"] = "something else"
    counts = agent.post(body).json()
    assert counts["samples"] == {"stored": 0, "duplicates": 1, "conflicts": 2}
    assert counts["processes"] == {"stored": 0, "duplicates": 2, "conflicts": 1}
    assert counts["events"] == {"stored": 0, "duplicates": 1, "conflicts": 1}
    assert not Sample.objects.filter(util_gpu_avg=12).exists()
    assert not ProcessRecord.objects.filter(command="torchrun").exists()


@pytest.mark.django_db
def test_duplicate_identities_inside_one_batch_are_stored_once():
    agent = Agent(enrolled().key, Client())
    gpu = new_gpu_uuid()
    start = recent_minute()
    same = sample(gpu, start)
    different = sample(gpu, start, readings=1)
    body = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[same, dict(same), different])).json()
    assert body["samples"] == {"stored": 1, "duplicates": 1, "conflicts": 1}


@pytest.mark.django_db
def test_outbox_marks_physical_gpu_hours_in_the_same_transaction():
    agent = Agent(enrolled().key, Client())
    parent, mig = new_gpu_uuid(), new_gpu_uuid("MIG")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    start = hour - timedelta(minutes=1)  # a 2-minute window across the hour boundary
    body = batch(gpus=[gpu_entry(parent), gpu_entry(mig, index=1, parent=parent)],
                 samples=[sample(mig, start, length_s=120)],
                 processes=[process(mig, start - timedelta(hours=1))])
    assert agent.post(body).status_code == 202
    marks = set(DirtyGpuHour.objects.values_list("gpu__uuid", "hour"))
    # The physical GPU, never the MIG device; every hour a stored record touches.
    assert marks == {(parent, hour - timedelta(hours=1)), (parent, hour),
                     (parent, hour - timedelta(hours=2))}


@pytest.mark.django_db
def test_duplicates_mark_nothing_new_and_refused_batches_mark_nothing():
    agent = Agent(enrolled().key, Client())
    body = full_batch(new_gpu_uuid())
    agent.post(body)
    generations = list(DirtyGpuHour.objects.values_list("generation", flat=True))
    body["batch_id"] = str(uuid.uuid4())
    agent.post(body)
    assert list(DirtyGpuHour.objects.values_list("generation", flat=True)) == generations
    bad = full_batch(new_gpu_uuid())
    bad["samples"][0]["readings"] = "many"
    assert agent.post(bad).status_code == 400
    assert DirtyGpuHour.objects.count() == len(generations)


@pytest.mark.django_db
def test_failure_while_storing_rolls_back_rows_receipt_and_outbox(monkeypatch):
    from gpuquota.ingest import batches

    def boom(**_kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(batches, "gpu_hours_mark_dirty", boom)
    agent = Agent(enrolled().key, Client())
    agent.client.raise_request_exception = False
    response = agent.post(full_batch(new_gpu_uuid()))
    assert response.status_code == 500
    assert not Sample.objects.exists() and not AgentBatch.objects.exists()
    assert not DirtyGpuHour.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_are_serialised_one_202_the_rest_200():
    issued = enrolled()
    body = full_batch(new_gpu_uuid(), minutes=30)
    responses = run_concurrently([lambda: Agent(issued.key, Client()).post(body)] * 6)
    results = [(response.status_code, response.json()) for response in responses]
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 5 + [202]
    assert len({json.dumps(body, sort_keys=True) for _, body in results}) == 1
    assert Sample.objects.count() == 30 and AgentBatch.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_with_the_same_records_store_each_once():
    issued = enrolled()
    bodies = []
    template = full_batch(new_gpu_uuid(), minutes=20)
    for _ in range(4):
        bodies.append({**template, "batch_id": str(uuid.uuid4())})
    results = [
        response.json()
        for response in run_concurrently(
            [lambda b=b: Agent(issued.key, Client()).post(b) for b in bodies]
        )
    ]
    assert sum(r["samples"]["stored"] for r in results) == 20
    assert sum(r["samples"]["duplicates"] for r in results) == 60
    assert Sample.objects.count() == 20
