"""Many nodes' in-process batches stored at once (`ingest/bulk.py`, the telemetry pulls')
store exactly what `batch_ingest` stores one batch after the other: the same samples,
process records, events, receipts and response bodies, node and GPU fields, outbox marks;
once per batch id (a replay gets the first response), in a handful of statements whatever
the number of nodes."""

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.bulk import Delivery, batches_ingest
from gpuquota.ingest.models import AgentBatch, GpuEvent, NodeBoot, ProcessRecord, Sample
from gpuquota.ingest.protocol import batch_check
from gpuquota.ingest.rows import ProcessRow, Rows
from gpuquota.inventory.models import Gpu, Node
from gpuquota.outbox.models import DirtyGpuHour
from tests.factories import NodeFactory, gpu_uuid, make_gpu

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 2, 12, tzinfo=UTC)
T = int(NOW.timestamp()) - 3600
PROFILING = (55.0, 40.0, 12.5, 30.0)


def _sample(gpu: str, start: int, util: float = 37.5, top: float = 40.0) -> tuple:
    return (gpu, start, start + 60, 2, util, top, 1024, 2048, 300.0, 18000.0, 61, None, None,
            *PROFILING)


def _body(node: Node, *, boot: str, gpus: list[str], key: str, driver: str | None = "550.1",
          events: list | None = None) -> dict:
    return batch_check({
        "schema_version": 1, "batch_id": str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
        "agent_instance_id": str(uuid.uuid5(uuid.NAMESPACE_URL, "source")),
        "sent_at": "2026-11-02T12:00:00Z",
        "node": {"hostname": node.hostname, "driver_version": driver, "boot_id": boot,
                 "agent_version": "dcgm-exporter via test"},
        "gpus": [{"uuid": g, "name": "NVIDIA H100", "index": i, "pci_bus_id": None,
                  "serial": None, "mig_parent_uuid": None} for i, g in enumerate(gpus)],
        "events": events or []})


@pytest.fixture
def fleet():
    """Three nodes with registered GPUs, a fourth whose GPU is new, and one sample stored
    already (under another batch id) that a delivery sends again."""
    nodes = [NodeFactory() for _ in range(4)]
    gpus = [[make_gpu(node=node, index=i).uuid for i in range(2)] for node in nodes[:3]]
    gpus.append([gpu_uuid()])
    a, b, c, new = nodes
    ga, gb, gc, gn = gpus
    xid = {"event_id": str(uuid.uuid4()), "gpu_uuid": ga[0], "ts": "2026-11-02T11:00:30Z",
           "type": "xid", "xid": 79}
    deliveries = [
        # plain rows, an odd one (average over maximum), processes, an event
        Delivery(node=a, body=_body(a, boot="boot-1", gpus=ga, key="a1", events=[xid]),
                 rows=Rows([_sample(ga[0], T), _sample(ga[0], T + 60, 50.0, 40.0),
                            _sample(ga[1], T)],
                           [ProcessRow(ga[0], T, T + 60, 77, 3, "python", "kubernetes",
                                       "llm-0", "nlp", 1024),
                            ProcessRow(ga[1], T, T + 60, 0, 3, None, None, None, None, None)])),
        # the same node after a reboot (a new boot), crossing an hour
        Delivery(node=a, body=_body(a, boot="boot-2", gpus=ga[:1], key="a2", driver=None),
                 rows=Rows([_sample(ga[0], T + 3570)], [])),
        Delivery(node=b, body=_body(b, boot="boot-b", gpus=gb, key="b1", driver=None),
                 rows=Rows([_sample(gb[0], T), _sample(gb[1], T)], [])),
        # a GPU to register: stored by batch_ingest after the others
        Delivery(node=new, body=_body(new, boot="boot-n", gpus=gn, key="n1"),
                 rows=Rows([_sample(gn[0], T)], [])),
        # one sample stored already: a duplicate, counted in this batch only
        Delivery(node=c, body=_body(c, boot="boot-c", gpus=gc, key="c1"),
                 rows=Rows([_sample(gc[0], T), _sample(gc[1], T)], [])),
    ]
    first = _body(c, boot="boot-c", gpus=gc[:1], key="c0")
    batch_ingest(node=c, body=first, now=NOW, check_age=False, rows=Rows([_sample(gc[0], T)],
                                                                           []))
    return deliveries


def _stored() -> dict:
    """Everything the batches wrote, without the ids two runs number differently."""
    boots = dict(NodeBoot.objects.values_list("id", "boot_id"))
    return {
        "samples": sorted((gpu, ws, we, *rest, boots.get(boot)) for gpu, ws, we, *rest, boot in
                          Sample.objects.values_list(
                              "gpu__uuid", "window_start", "window_end", "readings",
                              "util_gpu_avg", "util_gpu_max", "memory_used_bytes_max",
                              "power_w_avg", "energy_j", "temp_c_max", "sm_active_avg",
                              "received_at", "boot_id")),
        "processes": sorted(ProcessRecord.objects.values_list(
            "gpu__uuid", "window_start", "pid", "command", "job_source", "job_id",
            "job_account", "memory_used_bytes_max")),
        "events": sorted(GpuEvent.objects.values_list("event_id", "node__hostname",
                                                      "gpu__uuid", "ts", "type", "xid")),
        "receipts": sorted((str(b), h, boot, skew, sent, body) for b, h, boot, skew, sent, body
                           in AgentBatch.objects.values_list(
                               "batch_id", "node__hostname", "boot_id", "clock_skew_s",
                               "sent_at", "response_body")),
        "nodes": sorted(Node.objects.values_list("hostname", "last_seen_at", "agent_version",
                                                 "driver_version", "boot_id", "clock_skew_s")),
        "gpus": sorted(Gpu.objects.values_list("uuid", "node__hostname", "last_seen_at")),
        "boots": sorted(NodeBoot.objects.values_list("node__hostname", "boot_id")),
        "marks": sorted(DirtyGpuHour.objects.values_list("gpu__uuid", "hour")),
    }


class _Undone(Exception):
    pass


def _run(store) -> tuple[dict, list]:
    """What `store` stores, then undone."""
    try:
        with transaction.atomic():
            results = store()
            found = _stored()
            raise _Undone
    except _Undone:
        pass
    return found, results


def test_bulk_stores_what_batch_ingest_stores_batch_by_batch(fleet, clock):
    one_by_one, expected = _run(lambda: [
        batch_ingest(node=d.node, body=d.body, now=NOW, check_age=False, rows=d.rows)
        for d in fleet])
    at_once, results = _run(lambda: batches_ingest(deliveries=fleet, now=NOW, check_age=False))
    assert at_once == one_by_one
    assert results == expected
    assert [r.status for r in results] == [202] * 5
    assert results[0].body["events"]["stored"] == 1
    assert results[4].body["samples"] == {"stored": 1, "duplicates": 1, "conflicts": 0}
    assert [r["path"] for r in results[0].body["rejected"]] == ["processes[1].pid"]
    assert len(at_once["samples"]) == 9 and len(at_once["gpus"]) == 7


def test_a_replay_gets_the_first_responses_and_stores_nothing(fleet, clock):
    first = batches_ingest(deliveries=fleet, now=NOW, check_age=False)
    before = _stored()
    again = batches_ingest(deliveries=fleet, now=NOW, check_age=False)
    assert [r.status for r in again] == [200] * 5
    assert [r.body for r in again] == [r.body for r in first]
    assert _stored() == before


@pytest.mark.postgres  # elsewhere each batch is stored on its own
def test_statements_do_not_grow_with_the_nodes(clock):
    def statements(nodes: int) -> int:
        deliveries = []
        for n in range(nodes):
            node = NodeFactory()
            gpus = [make_gpu(node=node, index=i).uuid for i in range(8)]
            deliveries.append(Delivery(node=node, body=_body(node, boot="b", gpus=gpus,
                                                             key=f"{nodes} {n}"),
                                       rows=Rows([_sample(g, T) for g in gpus], [])))
        batches_ingest(deliveries=deliveries[:1], now=NOW, check_age=False)  # the partition
        with CaptureQueriesContext(connection) as queries:
            results = batches_ingest(deliveries=deliveries[1:], now=NOW, check_age=False)
        assert all(r.body["samples"]["stored"] == 8 for r in results)
        return len(queries)

    assert statements(4) == statements(40)
