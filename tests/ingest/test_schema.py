"""The agent endpoint in the published OpenAPI schema (a postprocessing hook)."""

import copy

import jsonschema
import pytest
from django.core.management import call_command
from drf_spectacular.settings import patched_settings
from drf_spectacular.validation import validate_schema

from gpuquota.ingest.protocol import SHAPES
from tests.ingest.factories import (
    URL,
    batch,
    event,
    gpu_entry,
    new_gpu_uuid,
    process,
    recent_minute,
    sample,
)

HOOKS = {"POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                                  "gpuquota.ingest.schema.agent_batches_schema"]}
RECORDS = {"gpus": "AgentGpu", "samples": "AgentSample", "processes": "AgentProcess",
           "events": "AgentEvent"}


@pytest.fixture
def schema(client):
    with patched_settings(HOOKS):
        response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def _json_schema(node):
    """OpenAPI 3.0's `nullable` as JSON Schema's null type, so jsonschema can check a body."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items()}
    if node.pop("nullable", False):
        if "type" in node:
            node["type"] = [node["type"], "null"]
            if "enum" in node:
                node["enum"] = [*node["enum"], None]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    return node


def batch_validator(schema) -> jsonschema.Draft7Validator:
    root = {"components": _json_schema(copy.deepcopy(schema["components"])),
            "$ref": "#/components/schemas/AgentBatch"}
    return jsonschema.Draft7Validator(root)


def full_batch() -> dict:
    gpu = new_gpu_uuid()
    start = recent_minute()
    return batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, start)],
                 processes=[process(gpu, start)],
                 events=[event(gpu, start), event(None, start, type_="agent_restart")])


@pytest.mark.django_db
def test_agent_endpoint_is_in_the_published_schema(schema):
    operation = schema["paths"][URL]["post"]
    assert operation["security"] == [{"nodeToken": []}]
    assert schema["components"]["securitySchemes"]["nodeToken"] == {
        "type": "http", "scheme": "bearer",
        "description": "A node token (gqn_...), issued when the node is enrolled."}
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/AgentBatch"}
    assert set(operation["responses"]) == {"200", "202", "400", "401", "413", "422", "429", "503"}
    assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
    assert "Retry-After" in operation["responses"]["503"]["headers"]
    assert {p["name"] for p in operation["parameters"]} == {"Idempotency-Key",
                                                            "Content-Encoding"}
    top = schema["components"]["schemas"]["AgentBatch"]
    assert top["required"] == ["schema_version", "batch_id", "agent_instance_id", "sent_at",
                               "node"]
    assert top["properties"]["samples"]["maxItems"] == 5000
    assert top["properties"]["events"]["maxItems"] == 1000


@pytest.mark.django_db
def test_record_schemas_say_what_the_structural_checks_refuse(schema):
    components = schema["components"]["schemas"]
    for kind, name in RECORDS.items():
        shape, record = SHAPES[kind], components[name]
        assert set(record["properties"]) == set(shape)
        assert record.get("required", []) == [f for f, (_, needed) in shape.items() if needed]
        for field, (_, needed) in shape.items():
            assert record["properties"][field].get("nullable", False) is not needed
    event_schema = components["AgentEvent"]["properties"]
    assert "xid" in event_schema["type"]["enum"] and "clock_skew" in event_schema["type"]["enum"]


@pytest.mark.django_db
def test_a_valid_batch_passes_the_schema_and_invalid_ones_do_not(schema):
    validator = batch_validator(schema)
    good = full_batch()
    good["samples"][0]["util_gpu_avg"] = None
    validator.validate(good)
    validator.validate(batch())  # a heartbeat
    for mutate in (lambda b: b["samples"][0].update(readings="6"),
                   lambda b: b["processes"][0].pop("pid"),
                   lambda b: b.pop("batch_id"),
                   lambda b: b["events"][0].update(type="meltdown")):
        bad = full_batch()
        mutate(bad)
        assert not validator.is_valid(bad)


@pytest.mark.django_db
def test_schema_still_validates_with_fail_on_warn(tmp_path):
    with patched_settings(HOOKS):
        call_command("spectacular", "--validate", "--fail-on-warn",
                     "--file", str(tmp_path / "schema.yaml"))
    assert "/api/v1/agent/batches" in (tmp_path / "schema.yaml").read_text()


def test_the_hook_output_is_a_valid_openapi_document():
    from gpuquota.ingest.schema import agent_batches_schema

    result = agent_batches_schema(result={"openapi": "3.0.3", "info": {"title": "t",
                                                                       "version": "1"},
                                          "paths": {}})
    validate_schema(result)
