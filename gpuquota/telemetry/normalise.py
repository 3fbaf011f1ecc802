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
  until its last reading plus the scrape interval (the agent's partial windows);
- every workload a series names (`labels.workload`) is a process record of the window:
  a GPU shared by two pods (or two Slurm jobs) has two;
- DCGM's profiling fields (SM active, SM occupancy, tensor pipes active, DRAM active; 0-1)
  become the sample's percentages where the exporter has them, null where not;
- health events and each record's boot come from `health.py`."""

import math
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from gpuquota.telemetry.fields import PROFILING
from gpuquota.telemetry.gather import GatheredGpu, Instance, gpus_gather, node_mates
from gpuquota.telemetry.health import GpuState, GpuTimeline, health_walk, iso, life_boot
from gpuquota.telemetry.labels import mig_device_uuid
from gpuquota.telemetry.models import UtilMetric

MIB = 1024 * 1024
CENT = Decimal("0.01")
MAX_PID = 4194304
METRIC = {"prof": UtilMetric.GR_ENGINE_ACTIVE, "util": UtilMetric.GPU_UTIL, None: UtilMetric.NONE}


@dataclass
class Unit:
    """A sample and the process records of its window: stored together, in one batch."""

    boot: str
    sample: dict
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
        return [unit.sample for unit in self.units]

    @property
    def processes(self) -> list[dict]:
        return [p for unit in self.units for p in unit.processes]

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
                "mig_parent_uuid": self.parent_uuid}


def _pct(value: float | None, scale: float) -> float | None:
    if value is None:
        return None
    return float(Decimal(repr(value * scale)).quantize(CENT, rounding=ROUND_HALF_UP))


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


@dataclass
class Edges:
    """Where the samples of a GPU or instance start and end, by window."""

    starts: dict = field(default_factory=dict)
    ends: dict = field(default_factory=dict)


def _instance_edges(gpu: GatheredGpu, instance: Instance, prefix: str, *, windows: range,
                    times: dict, scrape_s: int) -> Edges:
    counted = set()
    for series in instance.series.values():
        counted.update(ws for ws, n in series.figures.get(f"{prefix}_count", {}).items() if n)
    edges, w = Edges(), windows.step
    for ws in windows:
        if ws not in counted:
            continue
        found = times.get((gpu.uuid, instance.key, ws))
        if found is None:
            continue
        first, last = found
        if ws - w not in counted and ws - w >= windows.start:
            edges.starts[ws] = max(ws, math.floor(first))
        if ws + w not in counted:
            edges.ends[ws] = max(edges.starts.get(ws, ws) + 1,
                                 min(ws + w, math.floor(last) + scrape_s))
    return edges


def edges_wanted(gpus: dict[str, GatheredGpu], *, start: int, stop: int, window_s: int
                 ) -> dict[int, set]:
    """The windows (from one before `start`) in which a GPU or instance starts or stops
    reporting: their readings' times are needed, {window start: {(uuid, instance)}}."""
    wanted: dict[int, set] = {}
    for gpu in gpus.values():
        prefix = gpu.util_prefix()
        if prefix is None:
            continue
        for instance in gpu.util_instances():
            counted = set()
            for series in instance.series.values():
                counted.update(ws for ws, n in series.figures.get(f"{prefix}_count", {}).items()
                               if n)
            for ws in counted:
                if not start - window_s <= ws < stop:
                    continue
                if (ws - window_s not in counted and ws >= start) or ws + window_s not in counted:
                    wanted.setdefault(ws, set()).add((gpu.uuid, instance.key))
    return wanted


def _delta(series: dict, ws: int, window_s: int) -> float | None:
    now, before = series.get(ws), series.get(ws - window_s)
    return None if now is None or before is None else now - before


def _device_fields(gpu: GatheredGpu, ws: int, window_s: int) -> dict:
    dev = gpu.device
    energy = _delta(dev["energy_last"], ws, window_s)
    reset = (dev["energy_resets"].get(ws) or 0) > 0 or (energy is not None and energy < 0)
    # ECC counters and temperature are missing from many exporters' fields: no look-ups
    dbe = _delta(dev["dbe_last"], ws, window_s) if dev["dbe_last"] else None
    sbe = _delta(dev["sbe_last"], ws, window_s) if dev["sbe_last"] else None
    temp = dev["temp_max"].get(ws)
    return {"power_w_avg": dev["power_avg"].get(ws),
            "energy_j": None if reset or energy is None else energy / 1000.0,
            "temp_c_max": None if temp is None else round(temp),
            "ecc_uncorrected": None if dbe is None or dbe < 0 else round(dbe),
            "ecc_corrected": None if sbe is None or sbe < 0 else round(sbe)}


def _profiling(instance: Instance, ws: int) -> dict:
    """The window's DCGM profiling figures (0-1) as the sample's percentages; None where the
    exporter has no such field: no data, never 0."""
    out = {}
    for name in PROFILING:
        # a GPU shared by several pods repeats its readings under each pod's series
        values = [s.figures[name][ws] for s in instance.series.values()
                  if ws in s.figures.get(name, EMPTY)]
        out[name] = _pct(sum(values) / len(values), 100.0) if values else None
    return out


def _sample(gpu_uuid: str, span: tuple[int, int], found: _Window | None, scale: float,
            readings: int, extra: dict | None = None) -> dict:
    return {"gpu_uuid": gpu_uuid, "window_start": iso(span[0]), "window_end": iso(span[1]),
            "readings": readings,
            "util_gpu_avg": _pct(found.util_avg, scale) if found else None,
            "util_gpu_max": _pct(found.util_max, scale) if found else None,
            "memory_used_bytes_avg": None if not found or found.fb_avg is None
            else round(found.fb_avg * MIB),
            "memory_used_bytes_max": None if not found or found.fb_max is None
            else round(found.fb_max * MIB),
            **(extra or {})}


def _processes(device_uuid: str, instance: Instance, prefix: str, ws: int,
               span: tuple[int, int]) -> list[dict]:
    out = []
    for series in instance.series.values():
        if series.work is None or not series.figures.get(f"{prefix}_count", {}).get(ws):
            continue
        job, container = series.work
        identity = f"{job['source']}/{job.get('account', '')}/{job['id']}/{container}"
        memory = series.figures.get("fb_max", {}).get(ws)
        out.append({
            "gpu_uuid": device_uuid, "window_start": iso(span[0]), "window_end": iso(span[1]),
            "pid": zlib.crc32(identity.encode()) % MAX_PID + 1,
            "pid_start": zlib.crc32(instance.key.encode()), "command": container or None,
            "job": dict(job), "memory_used_bytes_max": None if memory is None
            else round(memory * MIB)})
    return out


def _gpu_edges(gpu: GatheredGpu, by_instance: dict[str, Edges], windows: range) -> Edges:
    """The physical GPU's sample edges: its own, or (MIG) its instances' widest."""
    if not gpu.mig:
        return by_instance.get("", Edges())
    edges, w = Edges(), windows.step
    for ws in windows:
        if ws not in gpu.present:
            continue
        if ws - w not in gpu.present:
            starts = [e.starts[ws] for e in by_instance.values() if ws in e.starts]
            if starts:
                edges.starts[ws] = min(starts)
        if ws + w not in gpu.present:
            ends = [e.ends[ws] for e in by_instance.values() if ws in e.ends]
            if ends:
                edges.ends[ws] = max(ends)
    return edges


def gpu_reports(gpu: GatheredGpu, *, start: int, stop: int, window_s: int, scrape_s: int,
                state: GpuState | None, mates: set, times: dict) -> list[GpuReport]:
    """The reports of one physical GPU (and of its MIG devices) for windows in
    [start, stop); `state` (the GPU's life and last XID before `start`) is updated."""
    prefix = gpu.util_prefix()
    scale = 100.0 if prefix == "prof" else 1.0
    cap = max(1, math.ceil(window_s / scrape_s))
    read = range(start - window_s, stop, window_s)
    by_instance = {} if prefix is None else {
        i.key: _instance_edges(gpu, i, prefix, windows=read, times=times, scrape_s=scrape_s)
        for i in gpu.util_instances()}
    edges = _gpu_edges(gpu, by_instance, read)
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
    for ws in range(start, stop, window_s):
        boot = health.boots.get(ws)
        if boot is None:
            continue  # nothing read of the GPU in this window: no data
        found: dict[str, _Window | None] = {
            i.key: _window(columns[i.key], ws, cap) for i in instances}
        span = (edges.starts.get(ws, ws), edges.ends.get(ws, ws + window_s))
        device = _device_fields(gpu, ws, window_s)
        if not gpu.mig:
            whole = found.get("")
            if whole is None or not whole.readings or prefix is None:
                continue
            physical.units.append(Unit(boot, _sample(
                gpu.uuid, span, whole, scale, whole.readings,
                {**device, **_profiling(gpu.instances[""], ws)}),
                                       _processes(gpu.uuid, gpu.instances[""], prefix, ws,
                                                  span)))
            continue
        counted = [f for f in found.values() if f is not None and f.readings]
        memory = [f.fb_avg for f in found.values() if f is not None and f.fb_avg is not None]
        physical.units.append(Unit(boot, _sample(
            gpu.uuid, span, None, scale, max((f.readings for f in counted), default=1),
            {**device, "memory_used_bytes_avg": round(sum(memory) * MIB) if memory
             else None})))
        for key, window in found.items():
            if window is None or not window.readings or prefix is None:
                continue
            own = by_instance[key]
            own_span = (own.starts.get(ws, ws), own.ends.get(ws, ws + window_s))
            devices[key].units.append(Unit(boot, _sample(
                devices[key].uuid, own_span, window, scale, window.readings,
                _profiling(gpu.instances[key], ws)),
                _processes(devices[key].uuid, gpu.instances[key], prefix, ws, own_span)))
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
