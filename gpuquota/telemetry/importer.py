"""Importing a source's windows: figures read (Prometheus or stored exporter readings),
normalised into the agent protocol's records and stored by the agent's own ingestion
service (`gpuquota.ingest.batches.batch_ingest`), so the same checks, identities and
rules apply. Batch ids come from the source, node, boot and range: importing a range
again stores nothing twice.

Each chunk reads one window before its range (for changes and counters' growth) and one
after (to know where a GPU stopped reporting): a range is imported once the window after
it has closed."""

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuquota.core.fields import whole_second
from gpuquota.core.gcpause import collector_paused
from gpuquota.ingest.bulk import Delivery, batches_ingest
from gpuquota.ingest.protocol import batch_check
from gpuquota.inventory.models import Gpu, Node
from gpuquota.inventory.services import gpu_class_for_model, gpu_register, gpus_register
from gpuquota.telemetry import conf, exposition, prometheus
from gpuquota.telemetry.cuts import reports_cut
from gpuquota.telemetry.edges import edges_wanted
from gpuquota.telemetry.gather import Observed, gpus_gather, node_mates
from gpuquota.telemetry.health import GpuState, iso, life_boot
from gpuquota.telemetry.models import ScrapedReading, SourceGpu, SourceKind, TelemetrySource
from gpuquota.telemetry.normalise import GpuReport, gpu_reports
from gpuquota.telemetry.stored import gpu_states, slurm_owners_fill

logger = logging.getLogger(__name__)

BATCH_NAMESPACE = uuid.UUID("9c4e2a71-3b8d-4f6e-a915-7d0b2c8e4f31")
# samples stored in one transaction: a 60 s pull of 10,000 GPUs is one, a back-fill's chunk
# of six hours of them many
STORE_SAMPLES = 50_000
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
    unknown_jobs: int = 0  # Slurm process records whose job the accounting does not know
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


def _registration(report: GpuReport, *, node: Node, known: dict, classes: dict) -> dict:
    """`gpu_register`'s arguments for a GPU seen for the first time, from its first window;
    `classes` holds the GPU classes by model name looked up so far (one look-up per
    model, not per GPU)."""
    first = min([datetime.fromtimestamp(u.sample[1], UTC) for u in report.units[:1]]
                + [datetime.fromisoformat(e["ts"]) for e in report.events])
    entry = report.entry()
    parent = known.get(report.parent_uuid) if report.parent_uuid else None
    model_name = entry["name"] or ""
    if parent is None and model_name not in classes:
        classes[model_name] = gpu_class_for_model(model_name=model_name)
    return {"node": node, "uuid": report.uuid, "model_name": model_name, "at": first,
            "index": entry["index"], "pci_bus_id": entry["pci_bus_id"] or "",
            "serial": entry["serial"] or "",
            "parent": parent, "gpu_class": None if parent else classes[model_name]}


def _node_of(report: GpuReport, *, source: TelemetrySource, known: dict, nodes: dict) -> Node:
    """The node a new GPU is registered on: its GPU's for a MIG device, else the one the
    source's node label names (in the source's cluster, created when new)."""
    if report.parent_uuid:
        return known[report.parent_uuid].node
    labels = report.labels
    hostname = (labels.get(source.node_label) or labels.get("Hostname")
                or labels.get("hostname") or "unnamed")[:253]
    if hostname not in nodes:
        nodes[hostname], _ = Node.objects.get_or_create(cluster=source.cluster,
                                                        hostname=hostname)
    return nodes[hostname]


def _gpus_register(reports: list[GpuReport], *, source: TelemetrySource, known: dict) -> None:
    """Register the reports' GPUs seen for the first time, as the agent's are, on their
    nodes (`_node_of`) from their first window: a back-fill's history is the GPU's own.
    GPUs, then MIG devices, each in bulk; when one was registered meanwhile (an agent,
    another pull), one at a time, and its node wins."""
    classes: dict = {}
    nodes: dict = {}
    for mig in (False, True):
        new = [r for r in reports if bool(r.parent_uuid) == mig and r.uuid not in known]
        if not new:
            continue
        arguments = [_registration(r, node=_node_of(r, source=source, known=known, nodes=nodes),
                                   known=known, classes=classes) for r in new]
        try:
            with transaction.atomic():
                known.update(zip([r.uuid for r in new], gpus_register(new=arguments),
                                 strict=True))
            continue
        except IntegrityError:
            pass
        for report, registration in zip(new, arguments, strict=True):
            try:
                with transaction.atomic():
                    known[report.uuid] = gpu_register(**registration)
            except IntegrityError:  # registered meanwhile: its node wins
                known[report.uuid] = Gpu.objects.select_related("node").get(uuid=report.uuid)


def _deliveries(*, source: TelemetrySource, node: Node, reports: list[GpuReport], start: int,
                stop: int, now: datetime) -> list[Delivery]:
    """The node's batches of [start, stop): one per boot and cut (`reports_cut`), with batch ids
    from the source, node, boot, range and cut."""
    driver = next((r.labels.get("DCGM_FI_DRIVER_VERSION") for r in reports
                   if r.labels.get("DCGM_FI_DRIVER_VERSION")), None)
    deliveries = []
    for boot, parts in reports_cut(reports).items():
        for index, part in enumerate(parts):
            key = f"{source.pk}|{node.pk}|{boot}|{start}|{stop}|{index}"
            body = {"schema_version": 1, "batch_id": str(uuid.uuid5(BATCH_NAMESPACE, key)),
                    "agent_instance_id": str(uuid.uuid5(BATCH_NAMESPACE,
                                                        f"source {source.pk}")),
                    "sent_at": iso(int(now.timestamp())),
                    "node": {"hostname": node.hostname, "driver_version": driver,
                             "boot_id": boot,
                             "agent_version": f"{AGENT_VERSION[source.kind]} via "
                                              f"{source.name}"[:64]},
                    "gpus": list(part["gpus"].values()), "events": part["events"]}
            # the body (node, GPUs, events) is checked as an agent's; its samples and
            # processes are rows, built here from typed figures: no JSON shape to check
            deliveries.append(Delivery(node=node, body=batch_check(body), rows=part["rows"]))
    return deliveries


def _send(deliveries: list[Delivery], *, now: datetime, result: ImportResult) -> None:
    """Store the batches through the agent's ingestion, many nodes' at once
    (`batches_ingest`: one transaction for up to STORE_SAMPLES samples)."""
    group: list[Delivery] = []
    samples = 0
    for delivery in [*deliveries, None]:
        if group and (delivery is None or samples + len(delivery.rows.samples) > STORE_SAMPLES):
            for stored in batches_ingest(deliveries=group, now=now, check_age=False):
                if stored.status == 200:
                    result.replayed_batches += 1  # this very range was imported before
                else:
                    result.add(stored.body)
            group, samples = [], 0
        if delivery is not None:
            group.append(delivery)
            samples += len(delivery.rows.samples)


def _used_metric_record(*, source: TelemetrySource, reports: list[GpuReport]) -> None:
    """Each GPU's SourceGpu row (the metric its utilization is read from, its last
    window), in a few queries whatever the number of GPUs."""
    physical = {r.uuid: r for r in reports if not r.parent_uuid and r.units}
    gpus = dict(Gpu.objects.filter(uuid__in=list(physical)).values_list("uuid", "id"))
    rows = {row.gpu_id: row for row in SourceGpu.objects.filter(
        source=source, gpu_id__in=list(gpus.values()))}
    new, changed = [], {}
    for gpu_uuid, gpu_id in gpus.items():
        report = physical[gpu_uuid]
        end = datetime.fromtimestamp(report.units[-1].sample[2], UTC)
        row = rows.get(gpu_id)
        if row is None:
            new.append(SourceGpu(source=source, gpu_id=gpu_id, util_metric=report.util_metric,
                                 last_window_end=end))
        elif (row.util_metric, row.last_window_end) != (report.util_metric, end):
            changed.setdefault((report.util_metric, end), []).append(row.pk)
    SourceGpu.objects.bulk_create(new, ignore_conflicts=True)
    # a chunk's GPUs mostly share their metric and last window: one UPDATE for each pair
    # (bulk_update's CASE per row cost more CPU than the rest of this function)
    for (util_metric, end), pks in changed.items():
        SourceGpu.objects.filter(pk__in=pks).update(util_metric=util_metric,
                                                    last_window_end=end)


def reports_store(*, source: TelemetrySource, reports: list[GpuReport], start: int, stop: int,
                  now: datetime, result: ImportResult) -> None:
    """Send the reports of [start, stop) through the agent's ingestion, a batch per node
    and boot, many nodes' batches in one transaction."""
    reports = [r for r in reports if r.units or r.event_boots]
    known = {g.uuid: g for g in Gpu.objects.select_related("node").filter(
        uuid__in=[r.uuid for r in reports] + [r.parent_uuid for r in reports if r.parent_uuid])}
    _gpus_register(reports, source=source, known=known)
    by_node: dict[int, tuple[Node, list[GpuReport]]] = {}
    for report in sorted(reports, key=lambda r: bool(r.parent_uuid)):  # GPUs, then MIG
        node = known[report.uuid].node  # its current node (a MIG device's is its GPU's)
        by_node.setdefault(node.pk, (node, []))[1].append(report)
    _send([delivery for node, node_reports in by_node.values()
           for delivery in _deliveries(source=source, node=node, reports=node_reports,
                                       start=start, stop=stop, now=now)],
          now=now, result=result)
    _used_metric_record(source=source, reports=reports)
    result.gpus += sum(1 for r in reports if not r.parent_uuid)


class _Reader:
    """A source's figures and reading times, from Prometheus or the stored scrapes."""

    def __init__(self, source: TelemetrySource):
        self.source = source
        self.readings: list = []
        self.spent = [0.0, 0.0]  # wall and CPU seconds reading

    def figures(self, *, start: int, stop: int) -> prometheus.WindowTable:
        began = (time.perf_counter(), time.process_time())
        try:
            return self._figures(start=start, stop=stop)
        finally:
            self.spent[0] += time.perf_counter() - began[0]
            self.spent[1] += time.process_time() - began[1]

    def _figures(self, *, start: int, stop: int) -> prometheus.WindowTable:
        source = self.source
        if source.kind == SourceKind.PROMETHEUS:
            return prometheus.window_figures(source, start=datetime.fromtimestamp(start, UTC),
                                             end=datetime.fromtimestamp(stop, UTC))
        found = ScrapedReading.objects.filter(source=source, at__gte=start, at__lt=stop)
        self.readings = [(r.at, r.series) for r in found.order_by("at")]
        return exposition.window_figures(self.readings, start=start, stop=stop,
                                         window_s=source.window_s)

    def times(self, wanted: dict[int, set]) -> dict:
        if not wanted:
            return {}
        began = (time.perf_counter(), time.process_time())
        try:
            return self._times(wanted)
        finally:
            self.spent[0] += time.perf_counter() - began[0]
            self.spent[1] += time.process_time() - began[1]

    def _times(self, wanted: dict[int, set]) -> dict:
        if self.source.kind == SourceKind.PROMETHEUS:
            return prometheus.point_times(self.source, wanted)
        return exposition.point_times(self.readings, wanted, window_s=self.source.window_s)


def _observed_record(source: TelemetrySource, observed: Observed, unknown_jobs: int) -> None:
    """Merge what this read showed into the source's `observed` (the pages read it)."""
    before = TelemetrySource.objects.filter(pk=source.pk).values_list("observed", flat=True)
    merged = dict(before.first() or {})
    now = observed.as_json()
    merged["metrics"] = sorted(set(merged.get("metrics", [])) | set(now["metrics"]))
    for name in ("kubernetes", "exported", "shared_pods", "hpc_job", "mig"):
        merged[name] = bool(merged.get(name)) or now[name]
    merged["unknown_jobs"] = int(merged.get("unknown_jobs", 0)) + unknown_jobs
    TelemetrySource.objects.filter(pk=source.pk).update(observed=merged)


def chunk_reports(reader: _Reader, *, start: int, stop: int,
                  states: dict[str, GpuState]) -> tuple[list[GpuReport], int, Observed]:
    """The reports of the windows in [start, stop) (reading one window either side);
    `states` carries each GPU's state from chunk to chunk."""
    source = reader.source
    window_s = source.window_s
    table = reader.figures(start=start - window_s, stop=stop + window_s)
    gpus, skipped, observed = gpus_gather(table, node_label=source.node_label)
    times = reader.times(edges_wanted(gpus, start=start, stop=stop, window_s=window_s))
    states.update(gpu_states([u for u in gpus if u not in states], before=start))
    mates = node_mates(gpus)
    reports = []
    for gpu_uuid in sorted(gpus):
        reports += gpu_reports(gpus[gpu_uuid], start=start, stop=stop, window_s=window_s,
                               scrape_s=source.scrape_interval_s,
                               state=states.setdefault(gpu_uuid, GpuState(
                                   boot_id=life_boot(gpu_uuid, None))),
                               mates=mates[gpu_uuid], times=times)
    return reports, skipped, observed


def range_import(*, source: TelemetrySource, start: datetime, end: datetime,
                 advance_cursor: bool = False, now: datetime | None = None) -> ImportResult:
    """Import the whole windows in [start, end), a chunk (TELEMETRY_CHUNK_S) at a time;
    with `advance_cursor`, the source's cursor follows each chunk stored (resumable).
    The window after `end` must have closed: it tells where GPUs stopped reporting."""
    window_s = source.window_s
    first = int(aligned(start, window_s).timestamp())
    last = int(aligned(end, window_s).timestamp())
    chunk_s = max(window_s, conf.CHUNK_S - conf.CHUNK_S % window_s)
    result = ImportResult()
    reader = _Reader(source)
    states: dict[str, GpuState] = {}
    for chunk_start in range(first, last, chunk_s):
        with collector_paused():
            _chunk_import(reader, chunk_start=chunk_start,
                          chunk_stop=min(last, chunk_start + chunk_s), states=states, now=now,
                          advance_cursor=advance_cursor, result=result)
    return result


def _chunk_import(reader: _Reader, *, chunk_start: int, chunk_stop: int, states: dict,
                  now: datetime | None, advance_cursor: bool, result: ImportResult) -> None:
    """Read, normalise and store the windows of [chunk_start, chunk_stop), adding to
    `result`."""
    source, window_s = reader.source, reader.source.window_s
    marks = [(time.perf_counter(), time.process_time())]
    read_before = list(reader.spent)
    reports, skipped, observed = chunk_reports(reader, start=chunk_start, stop=chunk_stop,
                                               states=states)
    unknown = slurm_owners_fill(cluster=source.cluster,
                                processes=[p for r in reports for u in r.units
                                           for p in u.processes])
    read = (reader.spent[0] - read_before[0], reader.spent[1] - read_before[1])
    marks.append((marks[0][0] + read[0], marks[0][1] + read[1]))
    marks.append((time.perf_counter(), time.process_time()))
    stamp = whole_second(now or timezone.now())
    # Each batch is stored whole (its own transaction); the figures were all read and
    # checked before the first one, and a chunk stored again replays its batch ids.
    reports_store(source=source, reports=reports, start=chunk_start, stop=chunk_stop,
                  now=stamp, result=result)
    _observed_record(source, observed, unknown)
    if advance_cursor:
        # the caller's instance too: a pull made with it again starts where this one ended
        source.cursor = datetime.fromtimestamp(chunk_stop, UTC)
        TelemetrySource.objects.filter(pk=source.pk).update(cursor=source.cursor)
    marks.append((time.perf_counter(), time.process_time()))
    for phase, (before, after) in zip(("read", "normalise", "store"),
                                      zip(marks, marks[1:], strict=False), strict=True):
        result.phases_s[phase] += after[0] - before[0]
        result.phases_cpu_s[phase] += after[1] - before[1]
    result.windows += (chunk_stop - chunk_start) // window_s
    result.skipped_series += skipped
    result.unknown_jobs += unknown
