"""Lemon detection (docs/reliability.md#lemons): a GPU or node whose hardware incidents
(failures and hardware warnings: the XID counts of Meta's lemon detection, arXiv
2410.21680) and jobs failed with no hardware event (its other signal) are significantly
more than its class's. Over the `WINDOW` before `as_of`, its incidents are compared with
those its days in service would see at its class's rate (the class without it and without
its lemons, found to a fixpoint: `_leave_out_lemons`), and its failed jobs with those its
job-days would see at its class's rate of failed jobs (the users' own failures, which
every GPU sees, explain themselves): two Poisson upper tails,
combined by Fisher's method, flagged below `ALPHA` divided by the units of the class and
with at least `MIN_SIGNALS` incidents and failed jobs beyond the expected. `ALPHA` was
calibrated on the benchmark's calibration seeds for at most one false flag per fleet-day
(docs/benchmarks.md#reliability), not on the seeds it reports. The score is -log10(p); the
evidence lists the failures by XID, repeats after a repair, the jobs a failure ended, the
failed jobs counted, hardware warnings and the row-remap headroom. The first-flagged time
is the signal since which the unit has been flagged at every signal up to `as_of`:
replaying history gives the same answer."""

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

from gpuquota.ingest.taxonomy import REMAP_SPARE_ROWS_PER_BANK
from gpuquota.reliability.history import (
    DAY_S,
    INCIDENT_GAP,
    GpuLife,
    History,
    failures_s,
    fleet_history,
)
from gpuquota.reliability.jobruns import FAILED, Busy
from gpuquota.reliability.stats import fisher_p, poisson_sf

WINDOW = timedelta(days=180)
ALPHA = 0.25  # a unit tested on its incidents alone
ALPHA_JOBS = 0.075  # on its incidents and failed jobs (less discrete: nearer its level)
MIN_SIGNALS = 3
OUTLIER_ROUNDS = 10  # rounds of leaving the flagged units out of their class's base rate
REPEAT_WITHIN = timedelta(days=7)
REMAP_LABELS = {"xid 63", "remap_pending"}
IN_SERVICE_S = 1e11  # "not retired", in seconds since the epoch (the year 5138)


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
    job_failed_times: list = field(default_factory=list)  # its jobs failed with no failure
    busy: Busy | None = None  # the job-days of the jobs it ran whole

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

    def jobs_failed(self, start: datetime, end: datetime) -> int:
        """Its jobs that failed in [start, end] with no hardware failure behind them."""
        times = self.job_failed_times
        return bisect.bisect_right(times, end) - bisect.bisect_left(times, start)

    def job_days(self, start: datetime, end: datetime) -> float:
        return self.busy.days(start, end) if self.busy else 0.0


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
    jobs_failed: int = 0  # its jobs failed with no hardware failure behind them
    jobs_expected: float | None = None  # those its class's rate per job-day would give it


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
    """The history's GPUs or nodes with their incidents and jobs (built once a history)."""
    if kind not in history.units:
        history.units[kind] = _units(history, kind)
    return history.units[kind]


def _units(history: History, kind: str) -> list[Unit]:
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
    _jobs_attach(history, by_key, key_of)
    return list(by_key.values())


def _jobs_attach(history: History, by_key: dict[str, Unit], key_of: dict[int, str]) -> None:
    """Give each unit the jobs it ran whole (a GPU: the one-GPU jobs on it; a node: the jobs
    all of whose GPUs were its own), their job-days and those that failed with no hardware
    failure of theirs within `INCIDENT_GAP` before the end (that failure is the incident's,
    counted already). A job spread over units is no unit's evidence: which failed is
    unknown."""
    failures_of = failures_s(history.incidents)
    gap_s, as_of = INCIDENT_GAP.total_seconds(), history.as_of.timestamp()
    spans: dict[str, list] = defaultdict(list)
    for run in history.runs:
        keys = {key_of[g] for g in run.gpu_ids}
        if len(keys) != 1:
            continue
        (key,) = keys
        spans[key].append((run.started_s, as_of if run.ended_s is None else run.ended_s))
        if run.state in FAILED and run.failure_hit(failures_of, gap_s) is None:
            by_key[key].job_failed_times.append(run.ended_at)
    for key, unit_spans in spans.items():
        by_key[key].busy = Busy(unit_spans)
        by_key[key].job_failed_times.sort()


@dataclass
class _Class:
    units: list[Unit]
    times: list  # the class's failure (or incident) instants, sorted
    job_failed_times: list = field(default_factory=list)
    with_warnings: bool = False  # `times` are all hardware incidents, not failures only
    outliers: dict[str, Unit] = field(default_factory=dict)  # left out of its base rates

    @cached_property
    def busy(self) -> Busy:
        return Busy([span for u in self.units if u.busy for span in u.busy.spans])

    @cached_property
    def service(self) -> Busy:
        """Its GPUs' days in service (a GPU not retired: in service for ever after)."""
        return Busy([(g.commissioned_at.timestamp(),
                      g.retired_at.timestamp() if g.retired_at else IN_SERVICE_S)
                     for u in self.units for g in u.gpus])

    def totals(self, start: datetime, end: datetime) -> tuple[int, float]:
        count = bisect.bisect_right(self.times, end) - bisect.bisect_left(self.times, start)
        return count, self.service.days(start, end)

    def job_totals(self, start: datetime, end: datetime) -> tuple[int, float]:
        """Its units' failed jobs and job-days in [start, end]."""
        times = self.job_failed_times
        count = bisect.bisect_right(times, end) - bisect.bisect_left(times, start)
        return count, self.busy.days(start, end)

    def _left_out(self, unit: Unit) -> list[Unit]:
        outliers = list(self.outliers.values())
        return outliers if unit.key in self.outliers else [*outliers, unit]

    def rest(self, unit: Unit, start: datetime, end: datetime) -> tuple[int, float]:
        """The class's count and days in service in [start, end] without the unit and
        without its outliers (the units flagged: its base rate's)."""
        count, days = self.totals(start, end)
        for u in self._left_out(unit):
            count -= u.signals(start, end) if self.with_warnings else u.count(start, end)
            days -= u.days(start, end)
        return count, days

    def jobs_rest(self, unit: Unit, start: datetime, end: datetime) -> tuple[int, float]:
        """Its failed jobs and job-days in [start, end] without the unit and its outliers."""
        count, job_days = self.job_totals(start, end)
        for u in self._left_out(unit):
            count -= u.jobs_failed(start, end)
            job_days -= u.job_days(start, end)
        return count, job_days


def classes_of(all_units: list[Unit], *, with_warnings: bool = False) -> dict[str, _Class]:
    """Each class's units and their failure instants (with warnings: all their hardware
    incidents, the lemon test's signals)."""
    grouped: dict[str, list[Unit]] = defaultdict(list)
    for unit in all_units:
        grouped[unit.gpu_class].append(unit)
    return {name: _Class(members, sorted(
        t for u in members
        for t in (u.signal_times if with_warnings else [i.at for i in u.failures])),
        job_failed_times=sorted(t for u in members for t in u.job_failed_times),
        with_warnings=with_warnings)
        for name, members in grouped.items()}


@dataclass
class _Tested:
    flagged: bool
    p_value: float
    incidents: int
    expected: float  # incidents
    jobs_failed: int = 0
    jobs_expected: float | None = None  # None: no job of the unit's or its class's to test


def _jobs_p(unit: Unit, peers: _Class, start: datetime, at: datetime
            ) -> tuple[int, float | None, float]:
    """(failed jobs, expected, p-value) of the unit's jobs that failed with no hardware
    failure, against its class's rate per job-day without it; (n, None, 1) when the unit
    or the rest of its class ran no job whole."""
    n, job_days = unit.jobs_failed(start, at), unit.job_days(start, at)
    rest_n, rest = peers.jobs_rest(unit, start, at)
    if job_days <= 0 or rest <= 0:
        return n, None, 1.0
    expected = max(rest_n, 1) / rest * job_days
    return n, expected, poisson_sf(n, expected)


def _test(unit: Unit, peers: _Class, at: datetime, *, jobs: bool = True) -> _Tested:
    """The unit over the window ending at `at`: its hardware incidents against its class's
    rate (Poisson), and with `jobs` its failed jobs against its class's (Poisson), the two
    p-values combined by Fisher's method; flagged below ALPHA (ALPHA_JOBS with the jobs)
    over the class's units, with at least MIN_SIGNALS incidents and failed jobs beyond
    what its class explains."""
    start = at - WINDOW
    n, days = unit.signals(start, at), unit.days(start, at)
    rest_n, rest_days = peers.rest(unit, start, at)
    if days <= 0 or rest_days <= 0:
        return _Tested(False, 1.0, n, 0.0)
    # the class's rate without the unit and its outliers; one pseudo-incident keeps a
    # spotless class testable
    expected = max(rest_n, 1) / rest_days * days
    p = poisson_sf(n, expected)
    failed, jobs_expected, jobs_p = _jobs_p(unit, peers, start, at) if jobs else (0, None, 1)
    signals = n
    if jobs_expected is not None:
        p = fisher_p([p, jobs_p])
        signals += max(0.0, failed - jobs_expected)
    alpha = ALPHA if jobs_expected is None else ALPHA_JOBS
    return _Tested(signals >= MIN_SIGNALS and p <= alpha / len(peers.units), p, n, expected,
                   failed, jobs_expected)


def _first_flagged(unit: Unit, peers: _Class, as_of: datetime, *, jobs: bool) -> datetime:
    first = as_of
    times = unit.signal_times + (unit.job_failed_times if jobs else [])
    recent = sorted(t for t in times if as_of - WINDOW <= t <= as_of)
    for at in reversed(recent):
        if not _test(unit, peers, at, jobs=jobs).flagged:
            break
        first = at
    return first


def _evidence(unit: Unit, tested: _Tested, as_of: datetime, killed: list) -> list[str]:
    start, expected = as_of - WINDOW, tested.expected
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
    if tested.jobs_expected is not None:
        lines.append(f"{tested.jobs_failed} of its jobs failed (FAILED or NODE_FAIL) with no "
                     f"hardware failure behind them where its class's rate per job-day "
                     f"would give {tested.jobs_expected:.2f}")
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


def _leave_out_lemons(klass: _Class, as_of: datetime, *, jobs: bool) -> None:
    """Leave the class's lemons out of its base rates, to a fixpoint: each round tests
    every unit against the rates of the class without the units flagged so far and adds
    those flagged now, until a round adds none. The lemons' incidents (tens of times a
    healthy GPU's) would otherwise raise the rate every unit is tested against, and hide
    the weaker lemons behind the stronger."""
    klass.outliers = {}
    for _ in range(OUTLIER_ROUNDS):
        found = {u.key: u for u in klass.units if u.key not in klass.outliers
                 and _test(u, klass, as_of, jobs=jobs).flagged}
        if not found:
            return
        klass.outliers = {**klass.outliers, **found}


def lemons_from(history: History, *, kind: str, jobs: bool = True) -> list[Flag]:
    """The flagged GPUs (kind "gpu") or nodes ("node") as of the history's instant (`jobs`
    False: on hardware incidents alone, as before failed jobs counted)."""
    as_of = history.as_of
    all_units = units(history, kind)
    classes = classes_of(all_units, with_warnings=True)
    for klass in classes.values():
        _leave_out_lemons(klass, as_of, jobs=jobs)
    flags = []
    for unit in all_units:
        peers = classes[unit.gpu_class]
        tested = _test(unit, peers, as_of, jobs=jobs)
        if not tested.flagged:
            continue
        failures, p = unit.count(as_of - WINDOW, as_of), tested.p_value
        flags.append(Flag(kind, unit.key, unit.gpu_class, unit.cluster,
                          round(min(99.0, -math.log10(max(p, 1e-99))), 2), p, failures,
                          tested.incidents - failures, round(tested.expected, 3),
                          _first_flagged(unit, peers, as_of, jobs=jobs),
                          _evidence(unit, tested, as_of, history.killed), tested.jobs_failed,
                          None if tested.jobs_expected is None
                          else round(tested.jobs_expected, 3)))
    return sorted(flags, key=lambda f: (-f.score, f.key))


def lemons(*, as_of: datetime, kind: str = "gpu") -> list[Flag]:
    """The lemons as of `as_of`, from what was recorded by then (the window and the
    window before it, for the first-flagged time)."""
    return lemons_from(fleet_history(as_of=as_of, since=as_of - 2 * WINDOW), kind=kind)
