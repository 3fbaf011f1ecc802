"""Where a GPU's (or MIG instance's) samples start and end: window edges from the readings'
own times, not rounded to the window. A GPU (or instance) that starts reporting
mid-window has a sample from its first reading; one that stops has a sample until its last
reading plus the scrape interval (the agent's partial windows)."""

import math
from dataclasses import dataclass, field

from gpuquota.telemetry.gather import GatheredGpu, Instance


@dataclass
class Edges:
    """Where the samples of a GPU or instance start and end, by window."""

    starts: dict = field(default_factory=dict)
    ends: dict = field(default_factory=dict)


def instance_edges(gpu: GatheredGpu, instance: Instance, prefix: str, *, windows: range,
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


def gpu_edges(gpu: GatheredGpu, by_instance: dict[str, Edges], windows: range) -> Edges:
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
