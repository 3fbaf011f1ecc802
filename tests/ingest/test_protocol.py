"""Tier one: refusals of the whole batch (400, 401, 413, 422) store nothing."""

import gzip
import json

import pytest
from django.test import Client

from gpuquota.ingest import conf
from gpuquota.ingest.models import AgentBatch, GpuEvent, ProcessRecord, Sample
from gpuquota.ingest.services import node_token_revoke, node_token_rotate
from tests.ingest.factories import (
    URL,
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

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent():
    return Agent(enrolled().key, Client())


def full_batch(**extra):
    gpu = new_gpu_uuid()
    start = recent_minute()
    return batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, start)],
                 processes=[process(gpu, start)], events=[event(gpu, start)], **extra)


def assert_nothing_stored():
    assert not Sample.objects.exists()
    assert not ProcessRecord.objects.exists()
    assert not GpuEvent.objects.exists()
    assert not AgentBatch.objects.exists()


def error_fields(response) -> list[str]:
    return [e["field"] for e in response.json()["errors"]]


def test_valid_batch_is_stored_and_answered_202(agent):
    response = agent.post(full_batch())
    assert response.status_code == 202
    body = response.json()
    for kind in ("samples", "processes", "events"):
        assert body[kind] == {"stored": 1, "duplicates": 0, "conflicts": 0}
    assert body["rejected"] == [] and body["nulled"] == []
    assert Sample.objects.count() == ProcessRecord.objects.count() == GpuEvent.objects.count() == 1


def test_gzip_body_is_decompressed(agent):
    response = agent.post(full_batch(), compress=True)
    assert response.status_code == 202
    assert Sample.objects.count() == 1


def test_corrupt_gzip_is_400(agent):
    response = agent.post(None, raw=b"\x1f\x8bnot really gzip",
                          headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert_nothing_stored()


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"schema_version": NaN}', b"\xff\xfe"])
def test_malformed_json_is_400(agent, raw):
    response = agent.post(None, raw=raw)
    assert response.status_code == 400
    assert error_fields(response) == ["body"]
    assert_nothing_stored()


@pytest.mark.parametrize("raw", [b"[]", b'"batch"', b"42"])
def test_not_an_object_is_400(agent, raw):
    response = agent.post(None, raw=raw)
    assert response.status_code == 400
    assert error_fields(response) == ["body"]


@pytest.mark.parametrize("mutate, field", [
    (lambda b: b.pop("batch_id"), "batch_id"),
    (lambda b: b.update(batch_id="not-a-uuid"), "batch_id"),
    (lambda b: b.update(agent_instance_id=12), "agent_instance_id"),
    (lambda b: b.pop("agent_instance_id"), "agent_instance_id"),
    (lambda b: b.update(schema_version="1"), "schema_version"),
    (lambda b: b.update(schema_version=1.0), "schema_version"),
    (lambda b: b.pop("schema_version"), "schema_version"),
    (lambda b: b.pop("sent_at"), "sent_at"),
    (lambda b: b.update(sent_at="yesterday"), "sent_at"),
    (lambda b: b.pop("node"), "node"),
    (lambda b: b.update(node="gpu-node-07"), "node"),
    (lambda b: b.update(seq_first="1041"), "seq_first"),
    (lambda b: b.update(samples={}), "samples"),
    (lambda b: b.update(gpus="GPU-0"), "gpus"),
    (lambda b: b["samples"][0].pop("gpu_uuid"), "samples[0].gpu_uuid"),
    (lambda b: b["samples"][0].pop("window_start"), "samples[0].window_start"),
    (lambda b: b["samples"][0].update(readings=None), "samples[0].readings"),
    (lambda b: b["samples"][0].update(readings="6"), "samples[0].readings"),
    (lambda b: b["samples"][0].update(util_gpu_avg="87.5"), "samples[0].util_gpu_avg"),
    (lambda b: b["samples"][0].update(temp_c_max=True), "samples[0].temp_c_max"),
    (lambda b: b["processes"][0].pop("pid"), "processes[0].pid"),
    (lambda b: b["processes"][0].update(pid_start=None), "processes[0].pid_start"),
    (lambda b: b["processes"][0].update(job="slurm"), "processes[0].job"),
    (lambda b: b["processes"][0].update(user=1012), "processes[0].user"),
    (lambda b: b["events"][0].pop("event_id"), "events[0].event_id"),
    (lambda b: b["events"][0].update(type=None), "events[0].type"),
    (lambda b: b["events"][0].update(xid="79"), "events[0].xid"),
    (lambda b: b["gpus"][0].pop("uuid"), "gpus[0].uuid"),
    (lambda b: b["gpus"][0].update(memory_total_bytes="80GB"), "gpus[0].memory_total_bytes"),
    (lambda b: b["samples"].append("sample"), "samples[1]"),
])
def test_structural_error_refuses_the_whole_batch(agent, mutate, field):
    body = full_batch()
    mutate(body)
    response = agent.post(body)
    assert response.status_code == 400, response.json()
    assert field in error_fields(response)
    assert response.json()["code"] == "invalid"
    assert_nothing_stored()


def test_every_structural_error_is_listed(agent):
    body = full_batch()
    body["batch_id"] = "x"
    body["samples"][0].pop("readings")
    body["processes"][0]["pid"] = "48211"
    response = agent.post(body)
    assert response.status_code == 400
    assert set(error_fields(response)) == {"batch_id", "samples[0].readings", "processes[0].pid"}


def test_idempotency_key_must_equal_batch_id(agent):
    body = full_batch()
    response = agent.post(body, headers={"Idempotency-Key": "7b1e4c3a-4f0e-4a59-9d3c-2f1d1c0b9a77"})
    assert response.status_code == 400
    assert error_fields(response) == ["Idempotency-Key"]
    assert_nothing_stored()
    assert agent.post(body, headers={"Idempotency-Key": body["batch_id"]}).status_code == 202


def test_schema_version_error_is_listed_with_the_other_problems(agent):
    body = full_batch()
    body.pop("schema_version")
    body["batch_id"] = "x"
    response = agent.post(body)
    assert response.status_code == 400
    assert set(error_fields(response)) == {"schema_version", "batch_id"}
    assert_nothing_stored()


def test_idempotency_key_mismatch_is_listed_with_the_other_problems(agent):
    body = full_batch()
    body.pop("agent_instance_id")
    response = agent.post(body, headers={"Idempotency-Key": "7b1e4c3a-4f0e-4a59-9d3c-2f1d1c0b9a77"})
    assert response.status_code == 400
    assert set(error_fields(response)) == {"agent_instance_id", "Idempotency-Key"}
    assert_nothing_stored()


def test_deeply_nested_json_is_400_not_a_server_error(agent):
    response = agent.post(None, raw=b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert response.status_code == 400
    assert error_fields(response) == ["body"]


@pytest.mark.parametrize("name", ["seq_first", "seq_last"])
def test_seq_beyond_64_bits_is_a_structural_error_not_a_server_error(agent, name):
    response = agent.post(full_batch(**{name: 2**64}))
    assert response.status_code == 400
    assert error_fields(response) == [name]
    assert_nothing_stored()


def test_unknown_fields_are_ignored_and_empty_batch_is_a_heartbeat(agent):
    body = batch(future_field={"x": 1})
    body["node"]["kernel"] = "6.1"
    response = agent.post(body)
    assert response.status_code == 202
    assert response.json()["samples"] == {"stored": 0, "duplicates": 0, "conflicts": 0}


def test_unsupported_schema_version_is_422_and_says_which_are(agent):
    response = agent.post(full_batch(schema_version=2))
    assert response.status_code == 422
    assert response.json()["supported_schema_versions"] == [1]
    assert "1" in response.json()["detail"]
    assert_nothing_stored()


@pytest.mark.parametrize("kind, limit, make", [
    ("samples", 5000, lambda g, t: sample(g, t)),
    ("processes", 5000, lambda g, t: process(g, t)),
    ("events", 1000, lambda g, t: event(g, t)),
])
def test_too_many_records_is_413(agent, kind, limit, make):
    gpu = new_gpu_uuid()
    record = make(gpu, recent_minute())
    body = batch(gpus=[gpu_entry(gpu)], **{kind: [record] * (limit + 1)})
    response = agent.post(body, compress=True)
    assert response.status_code == 413
    assert error_fields(response) == [kind]
    assert_nothing_stored()
    body[kind] = body[kind][:limit]
    assert agent.post(body, compress=True).status_code == 202


def test_body_over_4_mib_is_413_plain_or_decompressed(agent):
    padding = "x" * (conf.MAX_BODY_BYTES + 10)
    body = full_batch(padding=padding)
    assert agent.post(body).status_code == 413
    compressed = agent.post(body, compress=True)
    assert compressed.status_code == 413
    assert len(gzip.compress(json.dumps(body).encode())) < conf.MAX_BODY_BYTES
    assert_nothing_stored()


def post_with(token_header: str | None, body):
    client = Client()
    extra = {"HTTP_AUTHORIZATION": token_header} if token_header is not None else {}
    return client.post(URL, data=json.dumps(body), content_type="application/json", **extra)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer gqn_unknown", "Basic abc",
                                    "Token gqn_x"])
def test_missing_or_unknown_token_is_401_with_bearer_challenge(header):
    response = post_with(header, full_batch())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_nothing_stored()


def test_user_api_token_is_not_a_node_token(roles):
    from accounts.models import ApiToken
    from gpuquota.core.tokens import token_generate

    new = token_generate("u")
    ApiToken.objects.create(user=roles.admin, prefix=new.prefix, key_hash=new.key_hash)
    assert post_with(f"Bearer {new.key}", full_batch()).status_code == 401
    client = Client()
    client.force_login(roles.admin)
    assert client.post(URL, data=json.dumps(full_batch()),
                       content_type="application/json").status_code == 401


def test_revoked_token_is_401():
    issued = enrolled()
    node_token_revoke(node=issued.node, actor=None)
    response = post_with(f"Bearer {issued.key}", full_batch())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_rotated_token_replaces_the_old_one():
    issued = enrolled()
    rotated = node_token_rotate(node=issued.node, actor=None)
    assert post_with(f"Bearer {issued.key}", full_batch()).status_code == 401
    assert post_with(f"Bearer {rotated.key}", full_batch()).status_code == 202


def test_get_is_not_allowed(agent):
    assert agent.client.get(URL).status_code == 405


def test_database_unavailable_is_503_with_retry_after(agent, monkeypatch):
    from django.db import OperationalError

    from gpuquota.ingest import views

    def down(**_kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(views, "batch_ingest", down)
    response = agent.post(full_batch())
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
