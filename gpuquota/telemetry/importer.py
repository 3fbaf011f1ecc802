"""Importing a source's windows: figures read (Prometheus or stored exporter readings),
normalised into the agent protocol's records and stored by the agent's own ingestion
service (`gpuquota.ingest.batches.batch_ingest`), so the same checks, identities and
rules apply. Batch ids come from the source, node and range: importing a range again
stores nothing twice."""

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuquota.core.fields import whole_second
from gpuquota.ingest import conf as ingest_conf
from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.protocol import batch_check
from gpuquota.inventory.models import Gpu, Node
from gpuquota.inventory.services import gpu_register
from gpuquota.telemetry import conf, exposition, prometheus
from gpuquota.telemetry.models import ScrapedReading, SourceGpu, SourceKind, TelemetrySource
from gpuquota.telemetry.normalise import GpuReport, iso, reports_build

logger = logging.getLogger(__name__)

BATCH_NAMESPACE = uuid.UUID("9c4e2a71-3b8d-4f6e-a915-7d0b2c8e4f31")
AGENT_VERSION = {SourceKind.EXPORTER: "dcgm-exporter", SourceKind.PROMETHEUS: "prometheus"}


@dataclass
class ImportResult:
    """What an import stored, by the ingestion service's own counts."""

    windows: int = 0
    gpus: int = 0
    counts: dict = field(default_factory=lambda: {
        kind: {"stored": 0, "duplicates": 0, "conflicts": 0}
        for kind in ("samples", "processes", "events")})
    rejected: int = 0
    skipped_series: int = 0
    replayed_batches: int = 0
    # wall and CPU (this process) seconds by phase: reading the figures, normalising them,
    # storing the records
    phases_s: dict = field(default_factory=lambda: {"read": 0.0, "normalise": 0.0,
                                                    "store": 0.0})
    phases_cpu_s: dict = field(default_factory=lambda: {"read": 0.0, "normalise": 0.0,
                                                        "store": 0.0})

    def add(self, body: dict) -> None:
        for kind, counts in self.counts.items():
            for name in counts:
                counts[name] += body.get(kind, {}).get(name, 0)
        self.rejected += len(body.get("rejected", ()))


def aligned(instant: datetime, window_s: int) -> datetime:
    """The window boundary at or before `instant`."""
    epoch = int(instant.timestamp())
    return datetime.fromtimestamp(epoch - epoch % window_s, UTC)


def _node_for(report: GpuReport, *, source: TelemetrySource, known: dict) -> Node:
    """The GPU's current node when it is known (UUID decides); else it is registered, as
    the agent's are, on the node the source's node label names (in the source's cluster,
    created when new), from its first window: a back-fill's history is the GPU's own."""
    gpu = known.get(report.uuid)
    if gpu is not None:
        return gpu.node
    labels = report.labels
    hostname = (labels.get(source.node_label) or labels.get("Hostname")
                or labels.get("hostname") or "unnamed")[:253]
    node, _ = Node.objects.get_or_create(cluster=source.cluster, hostname=hostname)
    first = min([r["window_start"] for r in report.samples]
                + [r["ts"] for r in report.events])
    entry = report.entry()
    try:
        with transaction.atomic():
            known[report.uuid] = gpu_register(
                node=node, uuid=report.uuid, model_name=entry["name"] or "",
                at=datetime.fromisoformat(first), index=entry["index"],
                pci_bus_id=entry["pci_bus_id"] or "")
    except IntegrityError:  # registered meanwhile (an agent, another pull): its node wins
        known[report.uuid] = Gpu.objects.select_related("node").get(uuid=report.uuid)
    return known[report.uuid].node


def _parts(reports: list[GpuReport]) -> list[dict]:
    """The reports cut into bodies within the protocol's per-batch limits."""
    parts: list[dict] = []
    body: dict = {}
    for report in reports:
        for kind, limit in (("samples", ingest_conf.MAX_SAMPLES),
                            ("processes", ingest_conf.MAX_PROCESSES),
                            ("events", ingest_conf.MAX_EVENTS)):
            for record in getattr(report, kind):
                if not body or len(body[kind]) >= limit:
                    body = {"gpus": {}, "samples": [], "processes": [], "events": []}
                    parts.append(body)
                body["gpus"][report.uuid] = report.entry()
                body[kind].append(record)
    return parts


def _send(*, source: TelemetrySource, node: Node, reports: list[GpuReport], start: int,
          stop: int, now: datetime, result: ImportResult) -> None:
    driver = next((r.labels.get("DCGM_FI_DRIVER_VERSION") for r in reports
                   if r.labels.get("DCGM_FI_DRIVER_VERSION")), None)
    for index, part in enumerate(_parts(reports)):
        key = f"{source.pk}|{node.pk}|{start}|{stop}|{index}"
        body = {"schema_version": 1, "batch_id": str(uuid.uuid5(BATCH_NAMESPACE, key)),
                "agent_instance_id": str(uuid.uuid5(BATCH_NAMESPACE, f"source {source.pk}")),
                "sent_at": iso(int(now.timestamp())),
                "node": {"hostname": node.hostname, "driver_version": driver,
                         "agent_version": f"{AGENT_VERSION[source.kind]} via {source.name}"[:64]},
                **part, "gpus": list(part["gpus"].values())}
        stored = batch_ingest(node=node, body=batch_check(body), now=now, check_age=False)
        if stored.status == 200:
            result.replayed_batches += 1  # this very range was imported before
        else:
            result.add(stored.body)


def _used_metric_record(*, source: TelemetrySource, reports: list[GpuReport]) -> None:
    gpus = dict(Gpu.objects.filter(uuid__in=[r.uuid for r in reports]).values_list("uuid", "id"))
    for report in reports:
        if report.uuid in gpus and report.samples:
            SourceGpu.objects.update_or_create(
                source=source, gpu_id=gpus[report.uuid],
                defaults={"util_metric": report.util_metric,
                          "last_window_end": datetime.fromisoformat(
                              report.samples[-1]["window_end"])})


def reports_store(*, source: TelemetrySource, reports: list[GpuReport], start: int, stop: int,
                  now: datetime, result: ImportResult) -> None:
    """Send the reports of [start, stop) node by node through the agent's ingestion."""
    known = {g.uuid: g for g in Gpu.objects.select_related("node").filter(
        uuid__in=[r.uuid for r in reports])}
    by_node: dict[int, tuple[Node, list[GpuReport]]] = {}
    for report in reports:
        node = _node_for(report, source=source, known=known)
        by_node.setdefault(node.pk, (node, []))[1].append(report)
    for node, node_reports in by_node.values():
        _send(source=source, node=node, reports=node_reports, start=start, stop=stop, now=now,
              result=result)
    _used_metric_record(source=source, reports=reports)
    result.gpus += len(reports)


def _figures(source: TelemetrySource, *, start: int, stop: int) -> prometheus.WindowTable:
    """The window figures of [start - window, stop): one window before, for deltas."""
    before = start - source.window_s
    if source.kind == SourceKind.PROMETHEUS:
        return prometheus.window_figures(source, start=datetime.fromtimestamp(before, UTC),
                                         end=datetime.fromtimestamp(stop, UTC))
    readings = ScrapedReading.objects.filter(source=source, at__gte=before, at__lt=stop)
    return exposition.window_figures([(r.at, r.series) for r in readings.order_by("at")],
                                     start=before, stop=stop, window_s=source.window_s)


def range_import(*, source: TelemetrySource, start: datetime, end: datetime,
                 advance_cursor: bool = False, now: datetime | None = None) -> ImportResult:
    """Import the whole windows in [start, end), a chunk (TELEMETRY_CHUNK_S) at a time;
    with `advance_cursor`, the source's cursor follows each chunk stored (resumable)."""
    window_s = source.window_s
    first = int(aligned(start, window_s).timestamp())
    last = int(aligned(end, window_s).timestamp())
    chunk_s = max(window_s, conf.CHUNK_S - conf.CHUNK_S % window_s)
    result = ImportResult()
    for chunk_start in range(first, last, chunk_s):
        chunk_stop = min(last, chunk_start + chunk_s)
        marks = [(time.perf_counter(), time.process_time())]
        table = _figures(source, start=chunk_start, stop=chunk_stop)
        marks.append((time.perf_counter(), time.process_time()))
        reports, skipped = reports_build(table, start=chunk_start, stop=chunk_stop,
                                         window_s=window_s)
        marks.append((time.perf_counter(), time.process_time()))
        stamp = whole_second(now or timezone.now())
        # Each batch is stored whole (its own transaction); the figures were all read and
        # checked before the first one, and a chunk stored again replays its batch ids.
        reports_store(source=source, reports=reports, start=chunk_start, stop=chunk_stop,
                      now=stamp, result=result)
        if advance_cursor:
            TelemetrySource.objects.filter(pk=source.pk).update(
                cursor=datetime.fromtimestamp(chunk_stop, UTC))
        marks.append((time.perf_counter(), time.process_time()))
        for phase, (before, after) in zip(("read", "normalise", "store"),
                                          zip(marks, marks[1:], strict=False), strict=True):
            result.phases_s[phase] += after[0] - before[0]
            result.phases_cpu_s[phase] += after[1] - before[1]
        result.windows += (chunk_stop - chunk_start) // window_s
        result.skipped_series += skipped
    return result
