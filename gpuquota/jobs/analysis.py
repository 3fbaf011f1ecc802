"""A job's efficiency from the samples of the GPUs it held: pure (no Django, no database), so
the report, the notifications and the benchmark judge a job the same way.

What a note covers, so that the waste of a job is the sum of its notes' and never counts a
GPU-second twice (docs/jobs.md):

- a GPU held but not used (busy, at `idle_util_pct` or more, for less than
  `used_min_busy_s` and less than half its time: a brief burst does not count) is wasted
  whole: `gpus_unused`, or `memory_held_idle` when it held memory (on the mean) all the same;
- on the GPUs it used, an idle stretch at the end of the job (`idle_tail`) is wasted whole;
- before that tail, at most one of `mig_sized`, `interactive_idle`, `input_bound`,
  `low_utilization` (in that order) names what the used GPUs' spare share wasted;
- `short_job` and `time_limit_far` waste no GPU-second: they cost queue time, not GPUs;
  nor does `tensor_cores_unused` (DCGM's profiling fields, `profiling.py`): the GPUs
  worked, on the slow pipes.

Utilization is NVML's (the share of time a kernel ran): one busy SM of 132 reads as 100 %,
so a high figure proves little; a low one proves the GPU waited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from gpuquota.jobs.profiling import Profile, profile_of, tensor_cores_unused

GIB = 1024 ** 3
#: A GPU is "holding memory" above this (a CUDA context alone is about 0.5 GiB).
MEMORY_HELD_BYTES = GIB
#: The smallest MIG slice of an A100/H100 (1g) is a seventh of the GPU.
MIG_SLICE_SHARE = Fraction(1, 7)
#: A sample window is a burst with a gap when it peaked above this...
BURST_PEAK_PCT = 80
#: ...while its mean stayed at or under this.
BURST_MEAN_PCT = 50


@dataclass(frozen=True)
class Thresholds:
    """The notes' thresholds; defaults are jobstats' where it publishes one."""

    idle_util_pct: int = 1  # a window (or a GPU over the job) under this is idle
    low_util_pct: int = 15  # jobstats GPU_UTIL_RED
    min_runtime_s: int = 300  # jobstats MIN_RUNTIME_SECONDS (10 samples of 30 s)
    mig_memory_bytes: int = 10 * GIB  # jobstats: "less than 10 GB of GPU memory"
    idle_tail_s: int = 1800
    time_efficiency_pct: int = 10  # jobstats TIME_EFFICIENCY_RED
    interactive_idle_s: int = 8 * 3600  # jobstats: sessions over 8 hours at low use
    bursty_share_pct: int = 50  # share of a used GPU's time in bursts to call it input-bound
    used_min_busy_s: int = 600  # a GPU busy less (or under half its time) was not used
    # tensor_cores_unused (gpuquota's own: jobstats reads no profiling field)
    tensor_min_util_pct: int = 50  # the used GPUs busy at least this (NVML)...
    tensor_active_max_pct: int = 1  # ...while their tensor pipes ran under this
    profiling_coverage_pct: int = 50  # profiling data over this share of their time


@dataclass(frozen=True)
class Point:
    """One sample window of one GPU."""

    start: datetime
    end: datetime
    util_pct: float | None
    util_max_pct: float | None = None
    memory_used_bytes: int | None = None
    energy_j: float | None = None
    sm_active_pct: float | None = None  # DCGM's profiling fields (`profiling.py`)
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None


@dataclass
class GpuSeries:
    key: str  # how the report names it: node/index
    memory_total_bytes: int | None
    points: list[Point]


@dataclass(frozen=True)
class JobFacts:
    start: datetime
    end: datetime  # the job's end, or now for a running job
    time_limit_s: int | None = None
    interactive: bool = False


@dataclass
class GpuFigures:
    key: str
    sampled_s: int = 0
    idle_s: int = 0
    busy_util_s: float = 0.0  # Σ seconds × utilization / 100
    memory_s: float = 0.0  # Σ seconds × memory used (bytes)
    util_max_pct: float | None = None
    memory_max_bytes: int | None = None
    memory_total_bytes: int | None = None
    energy_j: float = 0.0
    last_busy_end: datetime | None = None
    profile: Profile = field(default_factory=Profile)

    @property
    def util_avg_pct(self) -> float | None:
        return 100 * self.busy_util_s / self.sampled_s if self.sampled_s else None

    @property
    def busy_s(self) -> int:
        return self.sampled_s - self.idle_s

    @property
    def memory_mean_bytes(self) -> float:
        return self.memory_s / self.sampled_s if self.sampled_s else 0.0

    @property
    def memory_max_pct(self) -> float | None:
        if self.memory_max_bytes is None or not self.memory_total_bytes:
            return None
        return 100 * self.memory_max_bytes / self.memory_total_bytes


@dataclass
class Note:
    code: str
    severity: str  # "waste" (costs GPU-hours) or "advice"
    title: str
    advice: str
    wasted_gpu_s: int = 0


@dataclass
class Analysis:
    duration_s: int
    gpus_held: int
    gpus: list[GpuFigures]
    notes: list[Note] = field(default_factory=list)

    @property
    def held_gpu_s(self) -> int:
        return self.duration_s * self.gpus_held

    @property
    def sampled_gpu_s(self) -> int:
        return sum(g.sampled_s for g in self.gpus)

    @property
    def idle_gpu_s(self) -> int:
        return sum(g.idle_s for g in self.gpus)

    @property
    def util_avg_pct(self) -> float | None:
        sampled = self.sampled_gpu_s
        return 100 * sum(g.busy_util_s for g in self.gpus) / sampled if sampled else None

    @property
    def idle_share_pct(self) -> float | None:
        sampled = self.sampled_gpu_s
        return 100 * self.idle_gpu_s / sampled if sampled else None

    @property
    def wasted_gpu_s(self) -> int:
        return sum(n.wasted_gpu_s for n in self.notes)

    @property
    def energy_j(self) -> float:
        return sum(g.energy_j for g in self.gpus)

    @property
    def profile(self) -> Profile | None:
        """The GPUs' profiling figures merged; None: no profiling data."""
        return profile_of([g.profile for g in self.gpus])


def _clipped(point: Point, facts: JobFacts) -> int:
    start, end = max(point.start, facts.start), min(point.end, facts.end)
    return max(0, int((end - start).total_seconds()))


def gpu_figures(series: GpuSeries, facts: JobFacts, t: Thresholds) -> GpuFigures:
    """One GPU's figures over the job: sampled and idle seconds, mean and peak utilization,
    peak memory, energy, and when it last worked."""
    figures = GpuFigures(key=series.key, memory_total_bytes=series.memory_total_bytes)
    for point in series.points:
        seconds = _clipped(point, facts)
        if not seconds or point.util_pct is None:
            continue
        figures.sampled_s += seconds
        figures.profile.add(seconds, point)
        figures.busy_util_s += seconds * float(point.util_pct) / 100
        if float(point.util_pct) < t.idle_util_pct:
            figures.idle_s += seconds
        elif figures.last_busy_end is None or point.end > figures.last_busy_end:
            figures.last_busy_end = min(point.end, facts.end)
        peak = point.util_max_pct if point.util_max_pct is not None else point.util_pct
        figures.util_max_pct = max(figures.util_max_pct or 0, float(peak))
        if point.memory_used_bytes is not None:
            figures.memory_s += seconds * point.memory_used_bytes
            figures.memory_max_bytes = max(figures.memory_max_bytes or 0, point.memory_used_bytes)
        if point.energy_j:
            figures.energy_j += point.energy_j * seconds / max(
                1, (point.end - point.start).total_seconds())
    return figures


def _used(figures: GpuFigures, t: Thresholds) -> bool:
    """Busy (a window at `idle_util_pct` or more) for `used_min_busy_s`, or half its time:
    a brief burst on a GPU otherwise idle does not make it used."""
    return figures.busy_s > 0 and figures.busy_s >= min(t.used_min_busy_s,
                                                        figures.sampled_s / 2)


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds // 60} min"


def _unused_notes(unused: list[GpuFigures], held: int) -> list[Note]:
    notes = []
    holding = [g for g in unused if g.memory_mean_bytes >= MEMORY_HELD_BYTES]
    empty = [g for g in unused if g not in holding]
    if empty:
        title = (f"This job did not use {len(empty)} of the {held} GPUs it held."
                 if held > 1 else "This job did not use its GPU.")
        advice = ("Make the code spread over every GPU (torchrun --nproc_per_node, "
                  "DistributedDataParallel), or ask for fewer GPUs (--gres=gpu:N)."
                  if held > 1 else
                  "Check that the code runs on the GPU (torch.cuda.is_available(), the "
                  "CUDA build of the library) before a long run; a CPU-only job needs no GPU.")
        notes.append(Note("gpus_unused", "waste", title, advice,
                          sum(g.sampled_s for g in empty)))
    if holding:
        notes.append(Note(
            "memory_held_idle", "waste",
            f"{len(holding)} of the {held} GPUs held memory but computed nothing.",
            "The process allocated GPU memory and then waited: look for a hang, a "
            "deadlock between ranks, or work done on the CPU with the model left on the GPU.",
            sum(g.sampled_s for g in holding)))
    return notes


def _tail_s(used: list[GpuFigures], facts: JobFacts, series_end: datetime | None) -> int:
    """How long every used GPU sat idle at the end of the job (as far as samples show)."""
    last_busy = [g.last_busy_end for g in used if g.last_busy_end is not None]
    if not last_busy or series_end is None:
        return 0
    seen_until = min(series_end, facts.end)
    return max(0, int((seen_until - max(last_busy)).total_seconds()))


def _burst_share(series: list[GpuSeries], keys: set[str], facts: JobFacts
                 ) -> tuple[int, int, float]:
    """(burst seconds, sampled seconds, Σ idle part of bursts) over the used GPUs."""
    burst = sampled = 0
    spare = 0.0
    for s in series:
        if s.key not in keys:
            continue
        for p in s.points:
            seconds = _clipped(p, facts)
            if not seconds or p.util_pct is None:
                continue
            sampled += seconds
            if (p.util_max_pct is not None and float(p.util_max_pct) >= BURST_PEAK_PCT
                    and float(p.util_pct) <= BURST_MEAN_PCT):
                burst += seconds
                spare += seconds * (1 - float(p.util_pct) / 100)
    return burst, sampled, spare


def _efficiency_note(used: list[GpuFigures], series: list[GpuSeries], facts: JobFacts,
                     t: Thresholds, tail_s: int, held: int) -> Note | None:
    """The one note on how the used GPUs spent the time before the idle tail."""
    sampled = sum(g.sampled_s for g in used)
    if not sampled:
        return None
    before_tail = max(0, sampled - tail_s * len(used))
    if not before_tail:
        return None
    # The tail is idle: the time before it carries all the used GPUs' work.
    util = min(100.0, 100 * sum(g.busy_util_s for g in used) / before_tail)
    spare = int(before_tail * max(0.0, 1 - util / 100))
    duration = int((facts.end - facts.start).total_seconds())
    one = used[0]
    if (held == 1 and util < t.low_util_pct and one.memory_max_bytes is not None
            and one.memory_max_bytes < t.mig_memory_bytes
            and (one.memory_total_bytes or 0) >= 2 * t.mig_memory_bytes):
        return Note("mig_sized", "waste",
                    f"This job used {util:.0f} % of the GPU and at most "
                    f"{one.memory_max_bytes / GIB:.1f} GiB of its "
                    f"{one.memory_total_bytes / GIB:.0f} GiB.",
                    "It fits a MIG slice or a smaller GPU class: ask for one "
                    "(e.g. --gres=gpu:1g.10gb:1) and leave the large GPU to work that needs it.",
                    int(before_tail * (1 - MIG_SLICE_SHARE)))
    if facts.interactive and duration > t.interactive_idle_s and util <= t.low_util_pct:
        return Note("interactive_idle", "waste",
                    f"This interactive session held {held} GPU(s) for {_hours(duration)} "
                    f"at {util:.0f} % utilization.",
                    "Do not keep salloc, Jupyter or notebook sessions open for hours unless you "
                    "work in them throughout; end the session and submit long runs as batch jobs.",
                    spare)
    burst, burst_sampled, burst_spare = _burst_share(series, {g.key for g in used}, facts)
    if burst_sampled and 100 * burst >= t.bursty_share_pct * burst_sampled:
        return Note("input_bound", "waste",
                    f"The GPUs worked in short bursts with gaps ({100 * burst / burst_sampled:.0f} "
                    f"% of the time): they waited for input.",
                    "The data loading cannot keep up: use more loader workers "
                    "(DataLoader num_workers, pin_memory, prefetch), ask for more CPU cores, and "
                    "stage the data on the node's local disk.",
                    int(burst_spare))
    if util < t.low_util_pct and duration > t.min_runtime_s:
        return Note("low_utilization", "waste",
                    f"The GPUs this job used were busy {util:.0f} % of the time.",
                    "Profile the job (nsys, torch.profiler): a larger batch, mixed precision or "
                    "moving pre-processing off the GPU's critical path usually helps.",
                    spare)
    return None


def _tensor_note(used: list[GpuFigures], t: Thresholds) -> list[Note]:
    sampled = sum(g.sampled_s for g in used)
    title = tensor_cores_unused(
        used_sampled_s=sampled, profile=profile_of([g.profile for g in used]),
        util_pct=100 * sum(g.busy_util_s for g in used) / sampled if sampled else 0.0,
        min_util_pct=t.tensor_min_util_pct, max_tensor_pct=t.tensor_active_max_pct,
        min_coverage_pct=t.profiling_coverage_pct)
    return [Note("tensor_cores_unused", "advice", title,
                 "The math ran on the ordinary FP32 pipes: train in mixed precision "
                 "(torch.autocast with bfloat16, or FP16 with a gradient scaler; "
                 "tf.keras.mixed_precision), or allow TF32 on Ampere and later "
                 "(torch.backends.cuda.matmul.allow_tf32); a job that needs FP64 or no "
                 "matrix math may ignore this.")] if title else []


def analyse(*, facts: JobFacts, gpus_held: int, series: list[GpuSeries],
            thresholds: Thresholds | None = None) -> Analysis:
    """The job's figures and notes (see the module's docstring for what each covers)."""
    t = thresholds or Thresholds()
    duration = max(0, int((facts.end - facts.start).total_seconds()))
    figures = [gpu_figures(s, facts, t) for s in series]
    result = Analysis(duration_s=duration, gpus_held=gpus_held, gpus=figures)
    sampled = [g for g in figures if g.sampled_s]
    if duration < t.min_runtime_s:
        result.notes.append(Note(
            "short_job", "advice", f"This job ran only {duration} s.",
            "Very short jobs spend most of their time starting up and waiting in the queue: "
            "bundle many small tasks into one job (a loop, a job array step)."))
    elif sampled:
        used = [g for g in sampled if _used(g, t)]
        unused = [g for g in sampled if not _used(g, t)]
        result.notes += _unused_notes(unused, gpus_held)
        ends = [p.end for s in series for p in s.points if s.key in {g.key for g in used}]
        tail_s = _tail_s(used, facts, max(ends) if ends else None)
        if used and tail_s >= t.idle_tail_s:
            result.notes.append(Note(
                "idle_tail", "waste",
                f"The GPUs sat idle for the last {_hours(tail_s)} of the job.",
                "End the job when its work ends: no trailing sleep, no notebook left open; "
                "checkpoint and exit, and let the next step run as its own job.",
                tail_s * len(used)))
        else:
            tail_s = 0
        note = _efficiency_note(used, series, facts, t, tail_s, gpus_held) if used else None
        if note is not None:
            result.notes.append(note)
        result.notes += _tensor_note(used, t)
    if (facts.time_limit_s and duration >= t.min_runtime_s
            and 100 * duration < t.time_efficiency_pct * facts.time_limit_s):
        result.notes.append(Note(
            "time_limit_far", "advice",
            f"This job used {100 * duration / facts.time_limit_s:.0f} % of its time limit "
            f"({_hours(facts.time_limit_s)}).",
            "Ask for less time (--time): shorter limits start sooner and let the scheduler "
            "backfill around them."))
    return result
