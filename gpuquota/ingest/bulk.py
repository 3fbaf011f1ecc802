"""Storing many nodes' in-process batches at once (the telemetry importer's pulls).

Each batch is stored as `batches.batch_ingest` stores it, once per (node, batch_id), with
the same receipt, checks, rows, outbox marks and response body, but all of them in one
transaction and a few statements in all instead of a dozen per batch (a 10,000-GPU pull is
1,250 nodes' batches). A batch outside the common case (a GPU to register, move or
refresh, a GPU listing that rejects or nulls something, its batch id twice in the call) is
stored by `batch_ingest` after the others, in its own transaction."""

import json
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

from gpuquota.ingest import conf
from gpuquota.ingest.batches import (
    BatchResult,
    batch_days,
    batch_ingest,
    boot_text,
    node_changes,
    nvml_state_update,
    receipt_values,
    receipts_insert_sql,
)
from gpuquota.ingest.models import AgentBatch, NodeBoot
from gpuquota.ingest.parsing import instant_parse
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.ingest.placement import gpus_known_read, gpus_listed, gpus_seen_mark, known_here
from gpuquota.ingest.records import GpuRef, Judge
from gpuquota.ingest.rows import Rows, rows_days, rows_judge
from gpuquota.ingest.storage import EVENTS, PROCESSES, SAMPLES, records_store_parts
from gpuquota.inventory.models import Node
from gpuquota.outbox.services import gpu_hours_mark_dirty

logger = logging.getLogger(__name__)

STATEMENT_ROWS = 500  # VALUES rows per statement


@dataclass
class Delivery:
    """One node's batch built in-process: its body (structurally checked, with no sample
    or process records) and its samples and processes as `Rows`."""

    node: Node
    body: dict
    rows: Rows
    placed: dict = field(default_factory=dict)
    seen: list = field(default_factory=list)
    receipt_pk: int | None = None
    nulled: list = field(default_factory=list)

    @property
    def key(self) -> tuple[int, uuid.UUID]:
        return self.node.pk, uuid.UUID(self.body["batch_id"])


def _in_chunks(rows: list) -> list[list]:
    return [rows[at:at + STATEMENT_ROWS] for at in range(0, len(rows), STATEMENT_ROWS)]


def _common(deliveries: list[Delivery], *, now: datetime) -> list[int]:
    """The deliveries in the common case, their GPUs placed: every GPU they name registered
    on their node as they list it, nothing rejected or nulled listing them, their batch id
    once in the call."""
    for delivery in deliveries:  # what an earlier call found (a replay's delivery) is not kept
        delivery.placed, delivery.seen, delivery.receipt_pk, delivery.nulled = {}, [], None, []
    keys = [d.key for d in deliveries]
    times = Counter(keys)
    listings = [gpus_listed(d.body, also=d.rows.gpu_uuids()) for d in deliveries]
    known = gpus_known_read({u for _, wanted, _, _ in listings for u in wanted})
    common = []
    for index, (delivery, (listed, wanted, rejected, nulled)) in enumerate(
            zip(deliveries, listings, strict=True)):
        if rejected or nulled or times[keys[index]] > 1:
            continue
        found = known_here(listed=listed, wanted=wanted, node=delivery.node, known=known,
                           now=now)
        if found is not None:
            delivery.placed, delivery.seen = found
            common.append(index)
    return common


def _claim(deliveries: list[Delivery], *, now: datetime) -> None:
    """Insert the receipts (a replay's is there already: its `receipt_pk` stays None)."""
    by_key = {d.key: d for d in deliveries}
    for chunk in _in_chunks(deliveries):
        params = []
        for d in chunk:
            sent_at = instant_parse(d.body["sent_at"])
            skew_s = round((now - sent_at).total_seconds(), 3) if sent_at else None
            params += receipt_values(node=d.node, body=d.body, now=now, skew_s=skew_s,
                                     sent_at=sent_at)
        with connection.cursor() as cursor:
            cursor.execute(receipts_insert_sql(len(chunk), returning="node_id, batch_id, id"),
                           params)
            for node_id, batch_id, pk in cursor.fetchall():
                by_key[(node_id, batch_id)].receipt_pk = pk


def _nodes_seen(deliveries: list[Delivery], *, now: datetime) -> None:
    """Each node's fields as its batches set them one after the other (the last wins)."""
    by_node: dict[int, dict] = {}
    for d in deliveries:
        sent_at = instant_parse(d.body["sent_at"])
        skew_s = round((now - sent_at).total_seconds(), 3) if sent_at else None
        by_node.setdefault(d.node.pk, {}).update(
            node_changes(body=d.body, now=now, skew_s=skew_s, nulled=d.nulled))
        if skew_s is not None and abs(skew_s) > conf.CLOCK_SKEW_THRESHOLD_S:
            logger.warning("node %s clock skew %.1f s (received_at - sent_at)", d.node, skew_s)
    adapt = connection.ops.adapt_datetimefield_value
    rows = [(pk, adapt(c["last_seen_at"]), c["clock_skew_s"], c.get("agent_version"),
             c.get("driver_version"), c.get("boot_id")) for pk, c in by_node.items()]
    for chunk in _in_chunks(rows):
        with connection.cursor() as cursor:  # a text a batch did not send is kept
            cursor.execute(
                f"UPDATE {Node._meta.db_table} AS n SET last_seen_at = v.seen, "
                "clock_skew_s = v.skew, agent_version = COALESCE(v.agent, n.agent_version), "
                "driver_version = COALESCE(v.driver, n.driver_version), "
                "boot_id = COALESCE(v.boot, n.boot_id) FROM (VALUES "
                + ", ".join(["(%s::bigint, %s::timestamptz, %s::float8, %s::text, %s::text, "
                             "%s::text)"] * len(chunk))
                + ") AS v(id, seen, skew, agent, driver, boot) WHERE n.id = v.id",
                [value for row in chunk for value in row])


def _boots(deliveries: list[Delivery], *, now: datetime) -> dict[tuple[int, str], int]:
    """The batches' boots by (node id, boot id), created at their first batch."""
    wanted = sorted({(d.node.pk, boot_text(d.body)) for d in deliveries} - {
        (d.node.pk, "") for d in deliveries})
    found = _boots_read(wanted)
    missing = [pair for pair in wanted if pair not in found]
    if missing:
        NodeBoot.objects.bulk_create([NodeBoot(node_id=node_id, boot_id=boot,
                                               first_received_at=now)
                                      for node_id, boot in missing], ignore_conflicts=True)
        found.update(_boots_read(missing))
    return found


def _boots_read(pairs: list[tuple[int, str]]) -> dict[tuple[int, str], int]:
    found = {}
    for chunk in _in_chunks(pairs):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT node_id, boot_id, id FROM {NodeBoot._meta.db_table} WHERE "
                "(node_id, boot_id) IN (" + ", ".join(["(%s, %s)"] * len(chunk)) + ")",
                [value for pair in chunk for value in pair])
            found.update({(node_id, boot): pk for node_id, boot, pk in cursor.fetchall()})
    return found


def _responses_write(responses: list[tuple[int, dict]]) -> None:
    for chunk in _in_chunks(responses):
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {AgentBatch._meta.db_table} AS a SET response_body = v.body FROM "
                "(VALUES " + ", ".join(["(%s::bigint, %s::jsonb)"] * len(chunk))
                + ") AS v(id, body) WHERE a.id = v.id",
                [value for pk, response in chunk for value in (pk, json.dumps(response))])


def _store(deliveries: list[Delivery], *, now: datetime, check_age: bool) -> list[BatchResult]:
    """Store the claimed deliveries' rows, marks and response bodies."""
    _nodes_seen(deliveries, now=now)
    gpus_seen_mark(ids=sorted({pk for d in deliveries for pk in d.seen}), now=now)
    boots = _boots(deliveries, now=now)
    outcomes = []
    for d in deliveries:
        outcome = rows_judge(body=d.body, rows=d.rows, node_id=d.node.pk, now=now, judge=Judge(
            gpus=d.placed, now=now, check_age=check_age,
            boot_pk=boots.get((d.node.pk, boot_text(d.body))), receipt_pk=d.receipt_pk))
        nvml_state_update(node=d.node, samples=outcome.samples, events=outcome.events)
        outcomes.append(outcome)
    stored = {name: records_store_parts(table=table, parts=[getattr(o, name) for o in outcomes])
              for name, table in (("samples", SAMPLES), ("processes", PROCESSES),
                                  ("events", EVENTS))}
    physical = {ref.id: ref.physical_id for d in deliveries for ref in d.placed.values()
                if type(ref) is GpuRef}
    gpu_hours_mark_dirty(marks=[(physical.get(gpu_id, gpu_id), at)
                                for parts in stored.values() for part in parts
                                for gpu_id, at in part.touched])
    responses = [{"batch_id": d.body["batch_id"],
                  **{name: parts[n].counts() for name, parts in stored.items()},
                  "rejected": outcomes[n].rejected, "nulled": d.nulled + outcomes[n].nulled}
                 for n, d in enumerate(deliveries)]
    _responses_write([(d.receipt_pk, r) for d, r in zip(deliveries, responses, strict=True)])
    return [BatchResult(202, response) for response in responses]


def batches_ingest(*, deliveries: list[Delivery], now: datetime,
                   check_age: bool = True) -> list[BatchResult]:
    """Store each delivery's batch exactly once per (node, batch_id), as `batch_ingest`
    would one after the other (a replay gets 200 and the first response body): those in
    the common case in one transaction, the others one by one after it. Results in the
    deliveries' order. On PostgreSQL; elsewhere each batch by `batch_ingest`."""
    if connection.vendor != "postgresql":  # the embedded default: one batch at a time
        return [batch_ingest(node=d.node, body=d.body, now=now, check_age=check_age,
                             rows=d.rows) for d in deliveries]
    days = set()
    for d in deliveries:
        days |= batch_days(d.body, now=now, check_age=check_age)
        days |= rows_days(d.rows, now=now, check_age=check_age)
    partitions_ensure(days=days)
    results: dict[int, BatchResult] = {}
    with transaction.atomic():
        common = _common(deliveries, now=now)
        _claim([deliveries[i] for i in common], now=now)
        for i in common:
            if deliveries[i].receipt_pk is None:  # a replay
                results[i] = BatchResult(200, AgentBatch.objects.filter(
                    node=deliveries[i].node, batch_id=deliveries[i].body["batch_id"]
                ).values_list("response_body", flat=True).get())
        new = [i for i in common if i not in results]
        results.update(zip(new, _store([deliveries[i] for i in new], now=now,
                                       check_age=check_age), strict=True))
    for i, d in enumerate(deliveries):
        if i not in results:
            results[i] = batch_ingest(node=d.node, body=d.body, now=now, check_age=check_age,
                                      rows=d.rows)
    return [results[i] for i in range(len(deliveries))]
