"""schemathesis over the whole published schema (/api/schema/), on PostgreSQL.

Every operation in the schema is fuzzed, so endpoints added later are covered
without touching this file: the user operations as a platform admin and as a team
lead (personal API tokens issued by the service), the agent endpoint with a node
token. Positive and negative examples, a bounded number per operation, fixed seed.
Pass: no 5xx, every response conforms to the schema (status code documented,
content type, body schema, headers), and every request that violates the schema is
refused with a 4xx. The counts per role are printed and written
to test-artifacts/fuzz-counts.json.
"""

import json
import os
from collections import Counter
from datetime import timedelta

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import api_token_create
from gpuquota.ingest import partitions
from gpuquota.ingest.schema import PATH as AGENT_PATH
from gpuquota.reservations.services import reservation_create
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu
from tests.ingest.factories import enrolled

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SEED = 20261201
EXAMPLES = int(os.environ.get("GPUQUOTA_FUZZ_EXAMPLES", "6"))  # per operation and mode
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance, negative_data_rejection]
# (mode, realistic): generated as is, and positive cases pointed at existing objects.
PASSES = [(GenerationMode.POSITIVE, False), (GenerationMode.NEGATIVE, False),
          (GenerationMode.POSITIVE, True)]
COUNTS: dict[str, dict] = {}


@pytest.fixture
def world(roles, settings):
    """A small organisation with a reservation to act on; throttles off (the fuzzer is
    faster than any person)."""
    settings.API_THROTTLE_TOKEN_RATE = "0"
    settings.API_THROTTLE_SESSION_RATE = "0"
    settings.INGEST_NODE_BATCHES_PER_MINUTE = 0
    partitions._known.clear()
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory(hostname="h100-a")
    for index in range(8):
        make_gpu(node=node, gpu_class=gpu_class, index=index)
    QuotaFactory(team=roles.team, gpu_class=gpu_class, gpus=4)
    start = timezone.now().replace(microsecond=0) + timedelta(days=1)
    held = [reservation_create(team=roles.team, gpu_class=gpu_class, count=count,
                               start=start, end=start + timedelta(hours=4),
                               requested_by=roles.lead) for count in (1, 2, 3)]  # 3: pending
    keys = {name: api_token_create(user=getattr(roles, name), name="fuzz")[1]
            for name in ("admin", "lead")}
    keys["node"] = enrolled(hostname="fuzz-node").key
    yield {"keys": keys, "reservations": [r.pk for r in held], "team": roles.team.slug,
           "gpu_class": gpu_class.name, "start": start}
    partitions._known.clear()


@pytest.fixture
def api_schema(world):
    """The published schema, called in-process over WSGI; like Django's test client,
    requests keep the test's database connection (and its transaction) open."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def _realistic(case, world: dict, number: int) -> None:
    """Point a generated case at objects that exist, so actions reach the services
    instead of stopping at a 404: a real reservation, team, class and near times."""
    if "pk" in (case.path_parameters or {}):
        case.path_parameters["pk"] = world["reservations"][number % len(world["reservations"])]
    if isinstance(case.body, dict):
        if "count" in case.body:
            case.body["count"] = 1 + number % 3
        for name in ("team", "gpu_class"):
            if name in case.body:
                case.body[name] = world[name]
        for hours, name in ((number % 48, "start"), (number % 48 + 1 + number % 5, "end")):
            if name in case.body:
                case.body[name] = (world["start"] + timedelta(hours=hours)).isoformat()


def _fuzz(operation, world: dict, key: str, mode, tally: Counter, failures: list,
          realistic: bool = False) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    examples = iter(range(10**6))

    @seed(SEED)
    @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None,
                         derandomize=True, phases=[Phase.explicit, Phase.generate],
                         suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        if realistic:
            _realistic(case, world, next(examples))
        response = case.call(headers={**(case.headers or {}), **headers})
        tally[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # noqa: BLE001 - collected, reported together below
            failures.append(f"{operation.label} [{mode.value}{' realistic' if realistic else ''}] "
                            f"-> {response.status_code}: "
                            f"{str(exc)[:600]}")

    run()


def _operations(api_schema, *, agent: bool) -> list:
    found = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if (operation.path == AGENT_PATH) == agent:
            found.append(operation)
    return found


def _report(role: str, operations: list, tally: Counter, failures: list) -> None:
    COUNTS[role] = {"operations": len(operations), "requests": sum(tally.values()),
                    "by_status": {str(k): v for k, v in sorted(tally.items())},
                    "server_errors": sum(v for k, v in tally.items() if k >= 500),
                    "nonconforming": len(failures)}
    os.makedirs("test-artifacts", exist_ok=True)
    path = "test-artifacts/fuzz-counts.json"
    existing = json.load(open(path)) if os.path.exists(path) else {}
    with open(path, "w") as out:
        json.dump({**existing, **COUNTS}, out, indent=2, sort_keys=True)
    print(f"\nfuzz {role}: {json.dumps(COUNTS[role])}")


@pytest.mark.parametrize("role", ["admin", "lead"])
def test_fuzz_the_api_as(role, world, api_schema):
    operations = _operations(api_schema, agent=False)
    assert len(operations) >= 15  # the whole schema, not a handful
    tally, failures = Counter(), []
    for operation in operations:
        for mode, realistic in PASSES:
            _fuzz(operation, world, world["keys"][role], mode, tally, failures, realistic)
    _report(role, operations, tally, failures)
    assert not failures, "\n\n".join(failures[:20])
    assert all(status < 500 for status in tally)


def test_fuzz_the_agent_endpoint_with_a_node_token(world, api_schema):
    operations = _operations(api_schema, agent=True)
    assert [o.path for o in operations] == [AGENT_PATH]
    tally, failures = Counter(), []
    for mode, realistic in PASSES:
        _fuzz(operations[0], world, world["keys"]["node"], mode, tally, failures, realistic)
    _report("node", operations, tally, failures)
    assert not failures, "\n\n".join(failures[:20])
    assert all(status < 500 for status in tally)


