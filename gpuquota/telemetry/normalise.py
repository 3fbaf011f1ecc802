"""Window figures (`fields.FIGURES`) turned into the agent protocol's records, one GPU
at a time, keyed by GPU UUID (never by hostname: dcgm-exporter renamed that label, and
on Kubernetes it is the exporter pod's name).

- utilization from DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1, as a percent) where the GPU has
  it, else DCGM_FI_DEV_GPU_UTIL; which one is recorded per GPU and source;
- per MIG instance (`GPU_I_ID`) figures are combined into the GPU's (utilization
  averaged over its instances, memory summed); device-level fields, repeated on every
  instance, are read once;
- energy is the growth of the mJ counter since the previous window; a counter that went
  back is a `counter_reset` event and no energy for that window; XID events are changes
  of the last XID (or growth of DCGM_EXP_XID_ERRORS_COUNT per xid); ECC counters give the
  sample's ECC growth and an `ecc_uncorrected` event; a pending row remap an event;
- a window without a single utilization reading is no data: no sample;
- the pod labels (`namespace`/`pod`/`container`, or the old `pod_namespace`/`pod_name`)
  become a Kubernetes process record (account = namespace); `hpc_job` a Slurm one."""

import uuid
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from gpuquota.inventory.models import gpu_uuid_normalize
from gpuquota.telemetry.fields import FIGURES, figure_usable
from gpuquota.telemetry.models import UtilMetric
from gpuquota.telemetry.prometheus import WindowTable

EVENT_NAMESPACE = uuid.UUID("2b8f7c1e-9d4a-4f3b-8e61-5a0c7d2e9f14")
MIB = 1024 * 1024
CENT = Decimal("0.01")
DEVICE_LEVEL = {figure.name for figure in FIGURES if figure.device_level}
MAX_PID = 4194304


@dataclass
class GpuReport:
    """One GPU's records over a range, in the agent protocol's form."""

    uuid: str
    labels: dict
    util_metric: str
    samples: list[dict] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    def entry(self) -> dict:
        """The batch's `gpus` entry (registers the GPU when new)."""
        index = self.labels.get("gpu", "")
        return {"uuid": self.uuid, "name": self.labels.get("modelName", "")[:128] or None,
                "index": int(index) if index.isdigit() else None,
                "pci_bus_id": self.labels.get("pci_bus_id", "")[:32] or None}


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uuid(labels: dict) -> str | None:
    try:
        return gpu_uuid_normalize(labels.get("UUID") or labels.get("uuid") or "")
    except ValueError:
        return None


def attribution(labels: dict) -> tuple[dict, str] | None:
    """(job, container) for a series' labels, or None when it names no workload."""
    namespace = labels.get("namespace") or labels.get("pod_namespace") or ""
    pod = labels.get("pod") or labels.get("pod_name") or ""
    if namespace and pod:
        return ({"source": "kubernetes", "id": pod[:256], "account": namespace[:256]},
                (labels.get("container") or labels.get("container_name") or "")[:256])
    hpc_job = labels.get("hpc_job") or ""
    if hpc_job:
        return {"source": "slurm", "id": hpc_job[:256]}, ""
    return None


def _pct(value: float | None, scale: float) -> float | None:
    if value is None:
        return None
    return float(Decimal(repr(value * scale)).quantize(CENT, rounding=ROUND_HALF_UP))


class _Gpu:
    """What the figures say about one GPU, gathered from all its series."""

    def __init__(self):
        self.labels: dict = {}
        self.device: dict[str, dict[int, float]] = defaultdict(dict)
        # figure -> instance -> label key -> {window: value}
        self.instance: dict = defaultdict(lambda: defaultdict(dict))
        self.xid_counts: list[tuple[int, dict[int, float]]] = []

    def add(self, name: str, labels: dict, points: dict[int, float]) -> None:
        points = {ws: v for ws, v in points.items() if figure_usable(v)}
        if not self.labels or (attribution(labels) is None and attribution(self.labels)):
            self.labels = labels
        if name == "xid_count_last":
            xid = labels.get("xid", "")
            if xid.isdigit():
                self.xid_counts.append((int(xid), points))
        elif name in DEVICE_LEVEL:
            merged = self.device[name]
            for ws, value in points.items():
                merged.setdefault(ws, value)
        else:
            key = tuple(sorted(labels.items()))
            merged = self.instance[name][labels.get("GPU_I_ID", "")].setdefault(key, {})
            merged.update(points)

    def util_prefix(self) -> str:
        return "prof" if self.instance.get("prof_count") else "util"

    def combined(self, name: str, ws: int, weights: str, *, total: bool = False
                 ) -> float | None:
        """A per-instance figure of window `ws`, combined over the series of each instance
        (weighted by their reading counts) and then over the instances."""
        per_instance = []
        counts = self.instance.get(weights, {})
        for instance, by_key in self.instance.get(name, {}).items():
            found = [(v[ws], counts.get(instance, {}).get(key, {}).get(ws, 1.0))
                     for key, v in by_key.items() if ws in v]
            if not found:
                continue
            if name.endswith("_count"):
                per_instance.append(sum(v for v, _ in found))
            elif name.endswith("_max"):
                per_instance.append(max(v for v, _ in found))
            else:
                weight = sum(w for _, w in found) or 1.0
                per_instance.append(sum(v * w for v, w in found) / weight)
        if not per_instance:
            return None
        if total:  # memory: the instances' slices add up
            return sum(per_instance)
        if name.endswith(("_count", "_max")):  # readings: each instance was read as often
            return max(per_instance)
        return sum(per_instance) / len(per_instance)


def _delta(series: dict[int, float], ws: int, window_s: int) -> float | None:
    now, before = series.get(ws), series.get(ws - window_s)
    return None if now is None or before is None else now - before


def _event(gpu_uuid: str, ws: int, kind: str, **extra) -> dict:
    key = f"{gpu_uuid}|{kind}|{ws}|{extra.get('xid', '')}"
    return {"event_id": str(uuid.uuid5(EVENT_NAMESPACE, key)), "gpu_uuid": gpu_uuid,
            "ts": iso(ws), "type": kind, **extra}


def _sample(gpu: _Gpu, report: GpuReport, ws: int, window_s: int, readings: int) -> dict:
    prefix = gpu.util_prefix()
    scale = 100.0 if prefix == "prof" else 1.0
    fb_avg = gpu.combined("fb_avg", ws, f"{prefix}_count", total=True)
    fb_max = gpu.combined("fb_max", ws, f"{prefix}_count", total=True)
    dev = gpu.device
    energy = _delta(dev["energy_last"], ws, window_s)
    reset = (dev["energy_resets"].get(ws) or 0) > 0 or (energy is not None and energy < 0)
    if reset:
        report.events.append(_event(report.uuid, ws, "counter_reset"))
    dbe, sbe = _delta(dev["dbe_last"], ws, window_s), _delta(dev["sbe_last"], ws, window_s)
    temp = dev["temp_max"].get(ws)
    return {
        "gpu_uuid": report.uuid, "window_start": iso(ws), "window_end": iso(ws + window_s),
        "readings": readings,
        "util_gpu_avg": _pct(gpu.combined(f"{prefix}_avg", ws, f"{prefix}_count"), scale),
        "util_gpu_max": _pct(gpu.combined(f"{prefix}_max", ws, f"{prefix}_count"), scale),
        "memory_used_bytes_avg": None if fb_avg is None else round(fb_avg * MIB),
        "memory_used_bytes_max": None if fb_max is None else round(fb_max * MIB),
        "power_w_avg": dev["power_avg"].get(ws),
        "energy_j": None if reset or energy is None else energy / 1000.0,
        "temp_c_max": None if temp is None else round(temp),
        "ecc_uncorrected": None if dbe is None or dbe < 0 else round(dbe),
        "ecc_corrected": None if sbe is None or sbe < 0 else round(sbe),
    }


def _health_events(gpu: _Gpu, report: GpuReport, ws: int, window_s: int) -> None:
    dev = gpu.device
    xid, before = dev["xid_last"].get(ws), dev["xid_last"].get(ws - window_s)
    if xid is not None and before is not None and xid != before and xid > 0:
        report.events.append(_event(report.uuid, ws, "xid", xid=int(xid)))
    for number, counts in gpu.xid_counts:
        grown = _delta(counts, ws, window_s)
        if grown is not None and grown > 0:
            report.events.append(_event(report.uuid, ws, "xid", xid=number))
    dbe = _delta(dev["dbe_last"], ws, window_s)
    if dbe is not None and dbe > 0:
        report.events.append(_event(report.uuid, ws, "ecc_uncorrected"))
    pending = dev["remap_max"].get(ws) or 0
    if pending >= 1 and (dev["remap_max"].get(ws - window_s) or 0) < 1:
        report.events.append(_event(report.uuid, ws, "remap_pending"))


def _processes(gpu: _Gpu, report: GpuReport, ws: int, window_s: int) -> None:
    prefix = gpu.util_prefix()
    fb_max = gpu.instance.get("fb_max", {})
    for instance, by_key in gpu.instance.get(f"{prefix}_count", {}).items():
        for key, counts in by_key.items():
            found = attribution(dict(key))
            if not found or not counts.get(ws):
                continue
            job, container = found
            identity = f"{job['source']}/{job.get('account', '')}/{job['id']}/{container}"
            memory = next((v[ws] for k, v in fb_max.get(instance, {}).items()
                           if attribution(dict(k)) == found and ws in v), None)
            report.processes.append({
                "gpu_uuid": report.uuid, "window_start": iso(ws),
                "window_end": iso(ws + window_s),
                "pid": zlib.crc32(identity.encode()) % MAX_PID + 1,
                "pid_start": zlib.crc32(instance.encode()), "command": container or None,
                "job": job, "memory_used_bytes_max": None if memory is None
                else round(memory * MIB)})


def reports_build(table: WindowTable, *, start: int, stop: int, window_s: int
                  ) -> tuple[list[GpuReport], int]:
    """The records of the windows starting in [start, stop) for every GPU in `table`
    (which also holds the window before `start`, for deltas), and how many series were
    skipped for a missing or malformed UUID."""
    gpus: dict[str, _Gpu] = defaultdict(_Gpu)
    skipped: set[tuple] = set()
    for name, series in table.items():
        for labels, points in series:
            gpu_uuid = _uuid(labels)
            if gpu_uuid is None:
                skipped.add(tuple(sorted(labels.items())))
                continue
            gpus[gpu_uuid].add(name, labels, points)
    reports = []
    for gpu_uuid in sorted(gpus):
        gpu = gpus[gpu_uuid]
        metric = (UtilMetric.GR_ENGINE_ACTIVE if gpu.util_prefix() == "prof"
                  else UtilMetric.GPU_UTIL)
        report = GpuReport(uuid=gpu_uuid, labels=gpu.labels, util_metric=metric)
        for ws in range(start, stop, window_s):
            readings = gpu.combined(f"{gpu.util_prefix()}_count", ws, "")
            if not readings:
                continue  # no reading in the window: no data, never idle
            report.samples.append(_sample(gpu, report, ws, window_s, int(readings)))
            _health_events(gpu, report, ws, window_s)
            _processes(gpu, report, ws, window_s)
        if report.samples or report.events:
            reports.append(report)
    return reports, len(skipped)
