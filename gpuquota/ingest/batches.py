"""Storing one structurally valid batch from one node, exactly once (agent-protocol.md)."""

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import repeat
from operator import itemgetter

from django.db import connection, transaction
from django.db.models import Value
from django.db.models.functions import Coalesce, Least

from gpuquota.ingest import conf
from gpuquota.ingest.columns import records_judge
from gpuquota.ingest.models import AgentBatch, EventType, NodeBoot
from gpuquota.ingest.parsing import instant_parse
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.ingest.placement import gpus_known_ctes, gpus_known_read, gpus_listed, gpus_place
from gpuquota.ingest.records import GpuRef, Judge
from gpuquota.ingest.rows import Rows, rows_days, rows_judge
from gpuquota.ingest.storage import EVENTS, PROCESSES, SAMPLES, records_store
from gpuquota.inventory.models import Node
from gpuquota.outbox.services import gpu_hours_mark_dirty

logger = logging.getLogger(__name__)

NODE_TEXT_FIELDS = ("agent_version", "driver_version", "boot_id")


@dataclass(frozen=True)
class BatchResult:
    """The HTTP status (202 stored now, 200 a replay) and the response body."""

    status: int
    body: dict


def batch_days(body: dict, *, now: datetime, check_age: bool) -> set:
    """The UTC days of the windows that may be stored: a window beyond the protocol's
    bounds is rejected later anyway, and must not create a partition (year 7898...)."""
    texts = set().union(*(map(dict.get, body.get(kind) or (), repeat("window_start"))
                          for kind in ("samples", "processes")))
    latest = now + timedelta(seconds=conf.MAX_FUTURE_S)
    earliest = now - timedelta(seconds=conf.MAX_AGE_S + conf.MAX_WINDOW_S) if check_age else None
    days = set()
    for text in texts:
        instant = instant_parse(text) if isinstance(text, str) else None
        if instant is None or instant > latest or (earliest and instant < earliest):
            continue
        days.add(instant.astimezone(UTC).date())
    return days


def boot_text(body: dict) -> str:
    """The batch's boot id as stored (no NUL, at most 64 characters; "" when none)."""
    return str((body["node"] or {}).get("boot_id") or "").replace("\x00", "")[:64]


def receipt_values(*, node: Node, body: dict, now: datetime, skew_s: float | None,
                   sent_at: datetime | None) -> list:
    """The batch receipt's columns (`RECEIPT_COLUMNS`), prepared for the database."""
    fields = {f.column: f for f in AgentBatch._meta.concrete_fields}
    values = {
        "node_id": node.pk, "batch_id": uuid.UUID(body["batch_id"]),
        "agent_instance_id": uuid.UUID(body["agent_instance_id"]),
        "boot_id": boot_text(body),
        "seq_first": body.get("seq_first"), "seq_last": body.get("seq_last"),
        "sent_at": sent_at and sent_at.replace(microsecond=0),  # stored instants: whole seconds
        "received_at": now, "clock_skew_s": skew_s, "response_body": {},
    }
    return [fields[c].get_db_prep_save(values[c], connection) for c in RECEIPT_COLUMNS]


RECEIPT_COLUMNS = ("node_id", "batch_id", "agent_instance_id", "boot_id", "seq_first",
                   "seq_last", "sent_at", "received_at", "clock_skew_s", "response_body")


def receipts_insert_sql(count: int, *, returning: str) -> str:
    """The INSERT of `count` receipts (`receipt_values`, one after the other): a receipt
    stored already (a replay's) is left as it is and returns nothing."""
    row = f"({', '.join(['%s'] * len(RECEIPT_COLUMNS))})"
    return (f"INSERT INTO {AgentBatch._meta.db_table} "
            f"({', '.join(map(connection.ops.quote_name, RECEIPT_COLUMNS))}) "
            f"VALUES {', '.join([row] * count)} "
            f"ON CONFLICT (node_id, batch_id) DO NOTHING RETURNING {returning}")


@dataclass(frozen=True)
class Claim:
    """What claiming a batch found: its new receipt's id (None for a replay), the id of its
    boot when stored already, and the registered GPUs among those it names (this node's
    seen now), as `placement.gpus_known_read` gives them."""

    receipt_pk: int | None
    boot_pk: int | None = None
    known: dict = field(default_factory=dict)


def _batch_claim(*, node: Node, body: dict, now: datetime, skew_s: float | None,
                 sent_at: datetime | None, seen: dict, uuids: list[str]) -> Claim:
    """Insert the batch receipt first: a concurrent duplicate waits on the unique index and
    then finds nothing to insert. When it is new, the node's row takes `seen` (its
    `node_changes`) and the GPUs among `uuids` are read (this node's seen now).

    On PostgreSQL all of it is one statement (one round trip: every batch makes it)."""
    quote = connection.ops.quote_name
    seen = {**seen, "last_seen_at": connection.ops.adapt_datetimefield_value(now)}
    insert = receipts_insert_sql(1, returning="id")
    insert_params = receipt_values(node=node, body=body, now=now, skew_s=skew_s,
                                   sent_at=sent_at)
    update = (f"UPDATE {Node._meta.db_table} SET "
              + ", ".join(f"{quote(name)} = %s" for name in seen) + " WHERE id = %s")
    update_params = [*seen.values(), node.pk]
    boot = f"SELECT id FROM {NodeBoot._meta.db_table} WHERE node_id = %s AND boot_id = %s"
    boot_params = [node.pk, boot_text(body)]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            gpus, gpus_params = gpus_known_ctes(  # "" (no GPU's) where the batch names none
                uuids or [""], node_id=node.pk, now=now, if_exists="claim")
            cursor.execute(f"WITH claim AS ({insert}), seen AS ({update} AND EXISTS "
                           f"(SELECT 1 FROM claim)), {gpus} SELECT claim.id, ({boot}), known.* "
                           "FROM claim LEFT JOIN known ON true",
                           insert_params + update_params + gpus_params + boot_params)
            rows = cursor.fetchall()
            if not rows:
                return Claim(None)
            return Claim(rows[0][0], rows[0][1], {r[2]: r[2:] for r in rows if r[2] is not None})
        cursor.execute(insert, insert_params)
        if (row := cursor.fetchone()) is None:
            return Claim(None)
        cursor.execute(update, update_params)
        cursor.execute(boot, boot_params)
        found = cursor.fetchone()
    return Claim(row[0], found and found[0],
                 gpus_known_read(uuids, seen_by=(node.pk, now)))


def _boot_of(*, node: Node, body: dict, now: datetime, found: int | None) -> int | None:
    """The batch's boot (`found` by the claim, or created at its first batch); None when the
    agent sent no boot_id. A spooled batch carries the boot it was collected under,
    whenever it arrives."""
    boot_id = boot_text(body)
    if not boot_id or found is not None:
        return found
    boot, _ = NodeBoot.objects.get_or_create(node=node, boot_id=boot_id,
                                             defaults={"first_received_at": now})
    return boot.pk


def node_changes(*, body: dict, now: datetime, skew_s: float | None, nulled: list) -> dict:
    """The Node fields a batch sets: last_seen_at, clock skew, and the versions and boot id
    it reports (a text too long or with a NUL is nulled, and the stored one kept)."""
    reported = body["node"] or {}
    changes = {"last_seen_at": now, "clock_skew_s": skew_s}
    for name in NODE_TEXT_FIELDS:
        value = reported.get(name)
        if value is not None and (len(value) > 64 or "\x00" in value):
            nulled.append({"path": f"node.{name}", "why": "longer than 64 characters or NUL"})
            value = None
        if value is not None:
            changes[name] = value
    hostname = reported.get("hostname")
    if hostname is not None and len(hostname) > 256:
        nulled.append({"path": "node.hostname", "why": "longer than 256 characters"})
    return changes


def nvml_state_update(*, node: Node, samples: list, events: list) -> None:
    """Node.nvml_unavailable_since: the earliest nvml_unavailable event of an outage, until
    a sample ends after it (sample and event times decide, never the order batches come)."""
    down = min((ts for _, _, _, ts, kind, *_ in events if kind == EventType.NVML_UNAVAILABLE),
               default=None)
    if down is None and node.nvml_unavailable_since is None:
        return  # no outage to open or close: the samples' ends are not needed
    latest = max(map(itemgetter(2), samples), default=None)
    if down is not None and (latest is None or latest <= down):
        Node.objects.filter(pk=node.pk).update(nvml_unavailable_since=Coalesce(
            Least("nvml_unavailable_since", Value(down)), Value(down)))
    elif latest is not None and (down is not None or node.nvml_unavailable_since is not None):
        Node.objects.filter(pk=node.pk, nvml_unavailable_since__lt=latest).update(
            nvml_unavailable_since=None)


def _replay(*, node: Node, batch_id: str) -> BatchResult:
    body = AgentBatch.objects.filter(node=node, batch_id=batch_id).values_list(
        "response_body", flat=True).get()
    return BatchResult(200, body)


def batch_ingest(*, node: Node, body: dict, now: datetime, check_age: bool = True,
                 rows: Rows | None = None) -> BatchResult:
    """Store a structurally valid batch once per (node, batch_id), rows and outbox marks in
    one transaction; a replay gets 200 and the first response body. A batch built
    in-process (the telemetry importer) may carry its samples and processes as `rows`,
    judged by the same rules (`rows.py`)."""
    days = batch_days(body, now=now, check_age=check_age)
    if rows is not None:
        days |= rows_days(rows, now=now, check_age=check_age)
    partitions_ensure(days=days)
    sent_at = instant_parse(body["sent_at"])
    skew_s = round((now - sent_at).total_seconds(), 3) if sent_at else None
    listing = gpus_listed(body, also=rows.gpu_uuids() if rows is not None else ())
    with transaction.atomic():
        nulled: list = []
        claim = _batch_claim(
            node=node, body=body, now=now, skew_s=skew_s, sent_at=sent_at,
            seen=node_changes(body=body, now=now, skew_s=skew_s, nulled=nulled),
            uuids=sorted(listing[1]))
        receipt_pk = claim.receipt_pk
        if receipt_pk is None:
            return _replay(node=node, batch_id=body["batch_id"])
        if skew_s is not None and abs(skew_s) > conf.CLOCK_SKEW_THRESHOLD_S:
            logger.warning("node %s clock skew %.1f s (received_at - sent_at)", node, skew_s)
        rejected: list = []
        placed = gpus_place(body=body, node=node, now=now, rejected=rejected, nulled=nulled,
                            listing=listing, known=claim.known)
        boot_pk = _boot_of(node=node, body=body, now=now, found=claim.boot_pk)
        if rows is None:
            outcome = records_judge(body=body, gpus=placed, node_id=node.pk, now=now,
                                    check_age=check_age, boot_pk=boot_pk,
                                    receipt_pk=receipt_pk)
        else:
            outcome = rows_judge(body=body, rows=rows, node_id=node.pk, now=now, judge=Judge(
                gpus=placed, now=now, check_age=check_age, boot_pk=boot_pk,
                receipt_pk=receipt_pk))
        nvml_state_update(node=node, samples=outcome.samples, events=outcome.events)
        results = {name: records_store(table=table, rows=rows) for name, table, rows in (
            ("samples", SAMPLES, outcome.samples), ("processes", PROCESSES, outcome.processes),
            ("events", EVENTS, outcome.events))}
        physical = {ref.id: ref.physical_id for ref in placed.values() if type(ref) is GpuRef}
        gpu_hours_mark_dirty(marks=[(physical.get(gpu_id, gpu_id), at)
                                    for result in results.values()
                                    for gpu_id, at in result.touched])
        response = {"batch_id": body["batch_id"],
                    **{name: result.counts() for name, result in results.items()},
                    "rejected": rejected + outcome.rejected, "nulled": nulled + outcome.nulled}
        with connection.cursor() as cursor:  # kept for a replay
            cursor.execute(f"UPDATE {AgentBatch._meta.db_table} SET response_body = %s "
                           "WHERE id = %s", [json.dumps(response), receipt_pk])
    return BatchResult(202, response)
