"""Gathered window figures (`gather.py`) turned into the agent protocol's records, one GPU
at a time, as the agent would have sent them for the same GPU and time:

- utilization from DCGM_FI_PROF_GR_ENGINE_ACTIVE (0-1, as a percent) where the GPU has
  it, else DCGM_FI_DEV_GPU_UTIL; which one is recorded per GPU and source;
- a MIG instance (`GPU_I_ID`) is a MIG device of its GPU, with its own samples (its own
  profiling figures, never DCGM_FI_DEV_GPU_UTIL) and its own processes; without
  profiling figures it has no samples: no data, never 0 %. The GPU's own sample carries
  the device-level fields (power, energy, temperature, ECC) and no utilization, as the
  agent's does;
- a window without a single utilization reading is no data: no sample;
- window edges come from the readings' own times: a GPU (or instance) that starts
  reporting mid-window has a sample from its first reading, one that stops has a sample
  until its last reading plus the scrape interval (the agent's partial windows;
  `edges.py`);
- every workload a series names (`labels.workload`) is a process record of the window:
  a GPU shared by two pods (or two Slurm jobs) has two;
- DCGM's profiling fields (SM active, SM occupancy, tensor pipes active, DRAM active; 0-1)
  become the sample's percentages where the exporter has them, null where not;
- health events and each record's boot come from `health.py`.

Samples and process records are rows (`ingest/rows.py`), which the agent's ingestion
judges by the agent's rules without a JSON form to parse back."""

import math
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from gpuquota.ingest.rows import ProcessRow, process_record, sample_record
from gpuquota.telemetry.device import Device
from gpuquota.telemetry.edges import Edges, gpu_edges, instance_edges
from gpuquota.telemetry.fields import PROFILING
from gpuquota.telemetry.gather import GatheredGpu, Instance, gpus_gather, node_mates
from gpuquota.telemetry.health import GpuState, GpuTimeline, health_walk, life_boot
from gpuquota.telemetry.labels import SERIAL_LABEL, mig_device_uuid
from gpuquota.telemetry.models import UtilMetric

MIB = 1024 * 1024
CENT = Decimal("0.01")
MAX_PID = 4194304
NO_DEVICE = (None,) * 5  # a MIG device's sample: the device-level fields are its GPU's
NO_PROFILING = (None,) * len(PROFILING)
METRIC = {"prof": UtilMetric.GR_ENGINE_ACTIVE, "util": UtilMetric.GPU_UTIL, None: UtilMetric.NONE}


@dataclass
class Unit:
    """A sample and the process records of its window (`rows.py`'s rows): stored together,
    in one batch."""

    boot: str
    sample: tuple
    processes: list = field(default_factory=list)


@dataclass
class GpuReport:
    """One GPU's (or MIG device's) records over a range, in the agent protocol's form."""

    uuid: str
    labels: dict
    util_metric: str
    parent_uuid: str | None = None
    name: str | None = None
    index: int | None = None
    units: list = field(default_factory=list)
    event_boots: list = field(default_factory=list)  # [(event, boot id)]

    @property
    def samples(self) -> list[dict]:
        """The samples as the agent protocol's records."""
        return [sample_record(unit.sample) for unit in self.units]

    @property
    def processes(self) -> list[dict]:
        """The process records as the agent protocol's."""
        return [process_record(p) for unit in self.units for p in unit.processes]

    @property
    def events(self) -> list[dict]:
        return [event for event, _ in self.event_boots]

    def entry(self) -> dict:
        """The batch's `gpus` entry (registers the GPU when new)."""
        index = self.labels.get("gpu", "")
        return {"uuid": self.uuid,
                "name": self.name or self.labels.get("modelName", "")[:128] or None,
                "index": self.index if self.parent_uuid else
                int(index) if index.isdigit() else None,
                "pci_bus_id": None if self.parent_uuid else
                self.labels.get("pci_bus_id", "")[:32] or None,
                "serial": None if self.parent_uuid else
                self.labels.get(SERIAL_LABEL, "")[:64] or None,
                "mig_parent_uuid": self.parent_uuid}


def _pct(value: float | None, scale: float) -> float | None:
    """The percent rounded half up to the cent in the decimals of its shortest text
    (`repr`), as Decimal would: in floats, whose error is far below the 1e-6 kept from a
    tie; a value that close to one, or beyond 1e6, is rounded by Decimal."""
    if value is None:
        return None
    scaled = value * scale
    if 0 <= scaled < 1e6:
        cents = scaled * 100
        below = math.floor(cents)
        if abs(cents - below - 0.5) > 1e-6:
            return (below + (cents - below > 0.5)) / 100
    return float(Decimal(repr(scaled)).quantize(CENT, rounding=ROUND_HALF_UP))


@dataclass
class _Window:
    """An instance's utilization figures in one window."""

    readings: int
    util_avg: float | None
    util_max: float | None
    fb_avg: float | None
    fb_max: float | None


EMPTY: dict = {}


def _columns(instance: Instance, prefix: str | None) -> list[tuple[dict, ...]]:
    """Each series' figure columns (count, avg, max, fb avg, fb max), looked up once."""
    out = []
    for series in instance.series.values():
        figures = series.figures
        util = [figures.get(f"{prefix}_{name}", EMPTY) if prefix else EMPTY
                for name in ("count", "avg", "max")]
        out.append((*util, figures.get("fb_avg", EMPTY), figures.get("fb_max", EMPTY)))
    return out


def _window_one(column: tuple[dict, ...], ws: int, cap: int) -> _Window | None:
    """`_window` of a single series (most GPUs), with the very same arithmetic."""
    counts, avgs, tops, fb_avgs, fb_tops = column
    count = counts.get(ws)
    fb = fb_avgs.get(ws)
    if not count and fb is None:
        return None
    util_avg = util_max = None
    if count:
        avg = avgs.get(ws)
        if avg is not None:
            util_avg = (0.0 + avg * count) / (0.0 + count)
        util_max = tops.get(ws)
    weight = count or 1
    return _Window(int(min(count or 0, max(count or 0, cap))), util_avg, util_max,
                   None if fb is None else (0.0 + fb * weight) / (0.0 + weight),
                   fb_tops.get(ws))


def _window(columns: list[tuple[dict, ...]], ws: int, cap: int) -> _Window | None:
    if len(columns) == 1:
        return _window_one(columns[0], ws, cap)
    total = largest = 0
    weighted = weight = 0.0
    util_max = fb_max = None
    fb_weighted = fb_weight = 0.0
    for counts, avgs, tops, fb_avgs, fb_tops in columns:
        count = counts.get(ws)
        if count:
            total += count
            largest = max(largest, count)
            avg = avgs.get(ws)
            if avg is not None:
                weighted, weight = weighted + avg * count, weight + count
            top = tops.get(ws)
            if top is not None:
                util_max = top if util_max is None else max(util_max, top)
        fb = fb_avgs.get(ws)
        if fb is not None:
            fb_weighted, fb_weight = fb_weighted + fb * (count or 1), fb_weight + (count or 1)
        top = fb_tops.get(ws)
        if top is not None:
            fb_max = top if fb_max is None else max(fb_max, top)
    if not total and fb_weight == 0:
        return None
    # the same readings under several pods' series (a shared GPU) count once
    readings = int(min(total, max(largest, cap)))
    return _Window(readings, weighted / weight if weight else None, util_max,
                   fb_weighted / fb_weight if fb_weight else None, fb_max)


class _Profiling:
    """An instance's DCGM profiling figures (0-1), looked up once, as each window's sample
    percentages in `PROFILING` order; None where the exporter has no such field: no data,
    never 0."""

    __slots__ = ("columns", "none")

    def __init__(self, instance: Instance):
        # a GPU shared by several pods repeats its readings under each pod's series
        self.columns = [[s.figures[name] for s in instance.series.values()
                         if name in s.figures] for name in PROFILING]
        self.none = not any(self.columns)

    def at(self, ws: int) -> tuple:
        if self.none:
            return NO_PROFILING
        out = []
        for column in self.columns:
            values = [figures[ws] for figures in column if ws in figures]
            out.append(_pct(sum(values) / len(values), 100.0) if values else None)
        return tuple(out)


def _sample(gpu_uuid: str, span: tuple[int, int], found: _Window | None, scale: float,
            readings: int, device: tuple = NO_DEVICE, memory_avg: int | None = None,
            profiling: tuple = NO_PROFILING) -> tuple:
    """The sample's row (`rows.SAMPLE_FIELDS`)."""
    if found is None:
        return (gpu_uuid, span[0], span[1], readings, None, None, memory_avg, None, *device,
                *profiling)
    fb_avg, fb_max = found.fb_avg, found.fb_max
    return (gpu_uuid, span[0], span[1], readings, _pct(found.util_avg, scale),
            _pct(found.util_max, scale), None if fb_avg is None else round(fb_avg * MIB),
            None if fb_max is None else round(fb_max * MIB), *device, *profiling)


@dataclass
class _Worker:
    """A series naming a workload, with what its process records repeat in every window."""

    counts: dict
    memory: dict
    pid: int
    pid_start: int
    command: str | None
    job: dict


def _workers(instance: Instance, prefix: str | None) -> list[_Worker]:
    out = []
    for series in instance.series.values():
        if series.work is None or prefix is None:
            continue
        job, container = series.work
        identity = f"{job['source']}/{job.get('account', '')}/{job['id']}/{container}"
        out.append(_Worker(series.figures.get(f"{prefix}_count", EMPTY),
                           series.figures.get("fb_max", EMPTY),
                           zlib.crc32(identity.encode()) % MAX_PID + 1,
                           zlib.crc32(instance.key.encode()), container or None, job))
    return out


def _processes(device_uuid: str, workers: list[_Worker], ws: int,
               span: tuple[int, int]) -> list[ProcessRow]:
    out = []
    for worker in workers:
        if not worker.counts.get(ws):
            continue
        memory = worker.memory.get(ws)
        job = worker.job
        out.append(ProcessRow(
            device_uuid, span[0], span[1], worker.pid, worker.pid_start, worker.command,
            job["source"], job["id"], job.get("account"),
            None if memory is None else round(memory * MIB)))
    return out


def _whole_units(gpu: GatheredGpu, boots: dict, edges: Edges, columns: list, workers: list,
                 *, window_s: int, cap: int, scale: float) -> list[Unit]:
    """The units of a GPU without MIG, window by window (the windows its health walked)."""
    if len(columns) == 1:
        return _one_series_units(gpu, boots, edges, columns[0], workers, window_s=window_s,
                                 scale=scale)
    units = []
    starts, ends, device = edges.starts, edges.ends, Device(gpu, window_s)
    profiling = _Profiling(gpu.instances[""])
    for ws, boot in boots.items():
        whole = _window(columns, ws, cap)
        if whole is None or not whole.readings:
            continue
        span = (starts.get(ws, ws), ends.get(ws, ws + window_s))
        units.append(Unit(boot, _sample(gpu.uuid, span, whole, scale, whole.readings,
                                         device.fields(ws), profiling=profiling.at(ws)),
                          _processes(gpu.uuid, workers, ws, span) if workers else []))
    return units


def _one_series_units(gpu: GatheredGpu, boots: dict, edges: Edges, column: tuple,
                      workers: list, *, window_s: int, scale: float) -> list[Unit]:
    """`_whole_units` of a GPU read in one series (most GPUs): `_window_one` and `_sample`
    inlined, with the very same arithmetic (a window without readings has no sample); the
    figures of the windows read with `map`, a percent rounded once per value."""
    counts, avgs, tops, fb_avgs, fb_tops = column
    starts, ends, gpu_uuid = edges.starts, edges.ends, gpu.uuid
    windows = [ws for ws, count in zip(boots, map(counts.get, boots), strict=True)
               if count]
    percents: dict = {None: None}  # a window's value is often the last one's, and max its avg
    # the series' own workload (most GPUs that run one): its process record is counted in
    # the very windows of the sample, with the sample's memory maximum
    own = workers[0] if len(workers) == 1 and workers[0].counts is counts and \
        workers[0].memory is fb_tops else None
    if own is not None:
        constants = (own.pid, own.pid_start, own.command, own.job["source"], own.job["id"],
                     own.job.get("account"))
    units = []
    profiling = _Profiling(gpu.instances[""])
    for ws, count, avg, top, fb, fb_top, device in zip(
            windows, map(counts.get, windows), map(avgs.get, windows), map(tops.get, windows),
            map(fb_avgs.get, windows), map(fb_tops.get, windows),
            Device(gpu, window_s).columns(windows), strict=True):
        span = (starts.get(ws, ws), ends.get(ws, ws + window_s))
        memory_max = None if fb_top is None else round(fb_top * MIB)
        if avg is not None:
            avg = (0.0 + avg * count) / (0.0 + count)
            if avg not in percents:
                percents[avg] = _pct(avg, scale)
        if top not in percents:
            percents[top] = _pct(top, scale)
        units.append(Unit(boots[ws], (
            gpu_uuid, span[0], span[1], int(count), percents[avg], percents[top],
            None if fb is None else round((0.0 + fb * count) / (0.0 + count) * MIB),
            memory_max, *device, *profiling.at(ws)),
            [ProcessRow(gpu_uuid, span[0], span[1], *constants, memory_max)] if own else
            _processes(gpu_uuid, workers, ws, span) if workers else []))
    return units


def gpu_reports(gpu: GatheredGpu, *, start: int, stop: int, window_s: int, scrape_s: int,
                state: GpuState | None, mates: set, times: dict) -> list[GpuReport]:
    """The reports of one physical GPU (and of its MIG devices) for windows in
    [start, stop); `state` (the GPU's life and last XID before `start`) is updated."""
    prefix = gpu.util_prefix()
    scale = 100.0 if prefix == "prof" else 1.0
    cap = max(1, math.ceil(window_s / scrape_s))
    read = range(start - window_s, stop, window_s)
    by_instance = {} if prefix is None else {
        i.key: instance_edges(gpu, i, prefix, windows=read, times=times, scrape_s=scrape_s)
        for i in gpu.util_instances()}
    edges = gpu_edges(gpu, by_instance, read)
    state = state or GpuState(boot_id=life_boot(gpu.uuid, None))
    health = health_walk(
        GpuTimeline(gpu.uuid, gpu.device, sorted(gpu.xid_counts.items()), gpu.present, mates,
                    edges.starts, edges.ends),
        state, windows=range(start, stop, window_s), window_s=window_s)
    physical = GpuReport(uuid=gpu.uuid, labels=gpu.labels, util_metric=METRIC[prefix],
                         event_boots=health.events)
    devices = {i.key: GpuReport(
        uuid=mig_device_uuid(gpu.uuid, i.key), labels=gpu.labels, util_metric=METRIC[prefix],
        parent_uuid=gpu.uuid, index=int(i.key) if i.key.isdigit() else None,
        name=(f"{gpu.labels.get('modelName', 'GPU')} MIG {i.profile}".strip())[:128])
        for i in gpu.util_instances()} if gpu.mig else {}
    instances = gpu.util_instances()
    columns = {i.key: _columns(i, prefix) for i in instances}
    workers = {i.key: _workers(i, prefix) for i in instances}
    if not gpu.mig:
        if prefix is not None and "" in columns:
            physical.units = _whole_units(gpu, health.boots, edges, columns[""], workers[""],
                                          window_s=window_s, cap=cap, scale=scale)
        return [physical]
    device_figures = Device(gpu, window_s)
    profiling = {i.key: _Profiling(i) for i in instances}
    for ws in range(start, stop, window_s):
        boot = health.boots.get(ws)
        if boot is None:
            continue  # nothing read of the GPU in this window: no data
        found: dict[str, _Window | None] = {
            i.key: _window(columns[i.key], ws, cap) for i in instances}
        span = (edges.starts.get(ws, ws), edges.ends.get(ws, ws + window_s))
        device = device_figures.fields(ws)
        counted = [f for f in found.values() if f is not None and f.readings]
        memory = [f.fb_avg for f in found.values() if f is not None and f.fb_avg is not None]
        physical.units.append(Unit(boot, _sample(
            gpu.uuid, span, None, scale, max((f.readings for f in counted), default=1),
            device, round(sum(memory) * MIB) if memory else None)))
        for key, window in found.items():
            if window is None or not window.readings or prefix is None:
                continue
            own = by_instance[key]
            own_span = (own.starts.get(ws, ws), own.ends.get(ws, ws + window_s))
            devices[key].units.append(Unit(boot, _sample(
                devices[key].uuid, own_span, window, scale, window.readings,
                profiling=profiling[key].at(ws)),
                _processes(devices[key].uuid, workers[key], ws, own_span)))
    return [physical, *devices.values()]


def reports_build(table, *, start: int, stop: int, window_s: int, scrape_s: int = 10,
                  node_label: str = "Hostname", times: dict | None = None
                  ) -> tuple[list[GpuReport], int]:
    """The records of the windows in [start, stop) of every GPU in `table` (which holds
    one window before and one after), from nothing stored: first lives, no loss known;
    and how many series were skipped for a missing or malformed UUID."""
    gpus, skipped, _ = gpus_gather(table, node_label=node_label)
    mates = node_mates(gpus)
    reports = []
    for gpu_uuid in sorted(gpus):
        reports += [r for r in gpu_reports(
            gpus[gpu_uuid], start=start, stop=stop, window_s=window_s, scrape_s=scrape_s,
            state=None, mates=mates[gpu_uuid], times=times or {}) if r.units or r.event_boots]
    return reports, skipped
