"""Lemon detection (docs/reliability.md#lemons): a GPU or node whose hardware incidents
(failures and hardware warnings: the XID counts of Meta's lemon detection, arXiv
2410.21680) are significantly more than its class's. Over the `WINDOW` before `as_of`,
its incidents are compared with those its days in service would see at its class's rate
(the class without it): the Poisson upper tail is the p-value, flagged below `ALPHA`
divided by the units of the class and with at least `MIN_SIGNALS` incidents. `ALPHA` was
calibrated on the benchmark's calibration seeds for at most one false flag per fleet-day
(docs/benchmarks.md#reliability), not on the seeds it reports. The score is -log10(p);
the evidence lists the failures by XID, repeats after a repair, the jobs that failed on
it, hardware warnings and the row-remap headroom. The first-flagged time is the incident
since which the unit has been flagged at every incident up to `as_of`: replaying history
gives the same answer."""

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuquota.ingest.taxonomy import REMAP_SPARE_ROWS_PER_BANK
from gpuquota.reliability.history import DAY_S, INCIDENT_GAP, GpuLife, History, fleet_history
from gpuquota.reliability.stats import poisson_sf

WINDOW = timedelta(days=180)
ALPHA = 0.5
MIN_SIGNALS = 3
REPEAT_WITHIN = timedelta(days=7)
REMAP_LABELS = {"xid 63", "remap_pending"}


@dataclass
class Unit:
    """A GPU or a node: what is tested."""

    kind: str  # "gpu" | "node"
    key: str
    gpu_class: str
    cluster: str
    gpus: list[GpuLife]
    failures: list = field(default_factory=list)  # Incident, in time order
    warnings: list = field(default_factory=list)
    signal_times: list = field(default_factory=list)  # failures' and warnings', sorted

    def days(self, start: datetime, end: datetime) -> float:
        return sum(g.service_s(start, end) for g in self.gpus) / DAY_S

    def count(self, start: datetime, end: datetime) -> int:
        """Failures in [start, end]."""
        times = [i.at for i in self.failures]
        return bisect.bisect_right(times, end) - bisect.bisect_left(times, start)

    def signals(self, start: datetime, end: datetime) -> int:
        """Hardware incidents, failures and warnings, in [start, end]."""
        times = self.signal_times
        return bisect.bisect_right(times, end) - bisect.bisect_left(times, start)


@dataclass
class Flag:
    kind: str
    key: str
    gpu_class: str
    cluster: str
    score: float
    p_value: float
    failures: int
    warnings: int
    expected: float  # incidents (failures and warnings) its class's rate would give it
    first_flagged: datetime
    evidence: list[str]


def _node_merged(incidents: list) -> list:
    """A node's incidents: those of its GPUs within INCIDENT_GAP are one (an NVLink or
    power fault that hits all eight GPUs at once is one event of the node)."""
    merged = []
    for incident in sorted(incidents, key=lambda i: i.at):
        if merged and incident.at - merged[-1].at <= INCIDENT_GAP:
            continue
        merged.append(incident)
    return merged


def units(history: History, kind: str) -> list[Unit]:
    by_key: dict[str, Unit] = {}
    for gpu in history.gpus.values():
        key = gpu.uuid if kind == "gpu" else f"{gpu.cluster}/{gpu.hostname}"
        unit = by_key.setdefault(key, Unit(kind, key, gpu.gpu_class, gpu.cluster, []))
        unit.gpus.append(gpu)
    key_of = {gpu.id: (gpu.uuid if kind == "gpu" else f"{gpu.cluster}/{gpu.hostname}")
              for gpu in history.gpus.values()}
    for incident in history.incidents:
        unit = by_key[key_of[incident.gpu_id]]
        (unit.failures if incident.is_failure else unit.warnings).append(incident)
    for unit in by_key.values():
        signals = unit.failures + unit.warnings
        if kind == "node":
            unit.failures = _node_merged(unit.failures)
            unit.warnings = _node_merged(unit.warnings)
            signals = _node_merged(signals)
            unit.gpu_class = Counter(g.gpu_class for g in unit.gpus).most_common(1)[0][0]
        unit.signal_times = sorted(i.at for i in signals)
    return list(by_key.values())


@dataclass
class _Class:
    units: list[Unit]
    times: list  # the class's failure (or incident) instants, sorted
    _days: dict = field(default_factory=dict)

    def totals(self, start: datetime, end: datetime) -> tuple[int, float]:
        count = bisect.bisect_right(self.times, end) - bisect.bisect_left(self.times, start)
        if (start, end) not in self._days:
            self._days[start, end] = sum(u.days(start, end) for u in self.units)
        return count, self._days[start, end]


def classes_of(all_units: list[Unit], *, with_warnings: bool = False) -> dict[str, _Class]:
    """Each class's units and their failure instants (with warnings: all their hardware
    incidents, the lemon test's signals)."""
    grouped: dict[str, list[Unit]] = defaultdict(list)
    for unit in all_units:
        grouped[unit.gpu_class].append(unit)
    return {name: _Class(members, sorted(
        t for u in members
        for t in (u.signal_times if with_warnings else [i.at for i in u.failures])))
        for name, members in grouped.items()}


def _test(unit: Unit, peers: _Class, at: datetime) -> tuple[bool, float, int, float]:
    """(flagged, p-value, hardware incidents, expected) of the unit over the window ending
    at `at`."""
    start = at - WINDOW
    n, days = unit.signals(start, at), unit.days(start, at)
    class_n, class_days = peers.totals(start, at)
    rest_days = class_days - days
    if days <= 0 or rest_days <= 0:
        return False, 1.0, n, 0.0
    # the class's rate without the unit; one pseudo-incident keeps a spotless class testable
    expected = max(class_n - n, 1) / rest_days * days
    p = poisson_sf(n, expected)
    return (n >= MIN_SIGNALS and p <= ALPHA / len(peers.units)), p, n, expected


def _first_flagged(unit: Unit, peers: _Class, as_of: datetime) -> datetime:
    first = as_of
    recent = [t for t in unit.signal_times if as_of - WINDOW <= t <= as_of]
    for at in reversed(recent):
        if not _test(unit, peers, at)[0]:
            break
        first = at
    return first


def _evidence(unit: Unit, expected: float, as_of: datetime, killed: list) -> list[str]:
    start = as_of - WINDOW
    failures = [i for i in unit.failures if start <= i.at <= as_of]
    warnings = [i for i in unit.warnings if start <= i.at <= as_of]
    labels = Counter(i.label for i in failures)
    lines = [f"{len(failures)} failures and {len(warnings)} hardware warnings in "
             f"{WINDOW.days} days where its class would see {expected:.2f} in all",
             "by cause: " + (", ".join(f"{label} x{c}" for label, c in labels.most_common())
                             or "no failure")]
    repeats = sum(1 for a, b in zip(failures, failures[1:], strict=False)
                  if b.at - a.at <= REPEAT_WITHIN)
    if repeats:
        lines.append(f"{repeats} failed again within {REPEAT_WITHIN.days} days of the last")
    ids = {g.id for g in unit.gpus}
    jobs = [j for j in killed if j.gpu_id in ids and start <= j.ended_at <= as_of]
    if jobs:
        lines.append(f"{len(jobs)} job{'s' if len(jobs) > 1 else ''} failed on it "
                     f"({sum(j.gpu_hours for j in jobs):.1f} GPU-hours lost)")
    if warnings:
        causes = ", ".join(f"{label} x{c}" for label, c in
                           Counter(i.label for i in warnings).most_common())
        plural = "s" if len(warnings) > 1 else ""
        lines.append(f"{len(warnings)} hardware warning{plural} ({causes})")
    remaps = sum(1 for i in unit.warnings if i.label in REMAP_LABELS and i.at <= as_of)
    if any(i.label == "xid 64" for i in unit.failures if i.at <= as_of):
        lines.append("row remapping failed (xid 64): no spare row left, NVIDIA's RMA condition")
    elif remaps:
        left = max(0, REMAP_SPARE_ROWS_PER_BANK - remaps)
        lines.append(f"{remaps} row{'s' if remaps > 1 else ''} remapped: about {left} of "
                     f"{REMAP_SPARE_ROWS_PER_BANK} spare rows per bank left at worst")
    return lines


def lemons_from(history: History, *, kind: str) -> list[Flag]:
    """The flagged GPUs (kind "gpu") or nodes ("node") as of the history's instant."""
    as_of = history.as_of
    all_units = units(history, kind)
    classes = classes_of(all_units, with_warnings=True)
    flags = []
    for unit in all_units:
        peers = classes[unit.gpu_class]
        flagged, p, n, expected = _test(unit, peers, as_of)
        if not flagged:
            continue
        failures = unit.count(as_of - WINDOW, as_of)
        flags.append(Flag(kind, unit.key, unit.gpu_class, unit.cluster,
                          round(min(99.0, -math.log10(max(p, 1e-99))), 2), p, failures,
                          n - failures, round(expected, 3), _first_flagged(unit, peers, as_of),
                          _evidence(unit, expected, as_of, history.killed)))
    return sorted(flags, key=lambda f: (-f.score, f.key))


def lemons(*, as_of: datetime, kind: str = "gpu") -> list[Flag]:
    """The lemons as of `as_of`, from what was recorded by then (the window and the
    window before it, for the first-flagged time)."""
    return lemons_from(fleet_history(as_of=as_of, since=as_of - 2 * WINDOW), kind=kind)
