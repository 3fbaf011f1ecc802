"""Jobs of known behaviour for bench/jobs.py: each a job's facts, the GPU series the agent
would have sent (one sample a minute per GPU, with noise and lost samples) and the notes a
correct report names. `workload(*, jobs, seed)` is the interface another generator keeps."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuquota.jobs.analysis import GIB, GpuSeries, JobFacts, Point

T0 = datetime(2026, 11, 2, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@dataclass
class BenchJob:
    behaviour: str
    facts: JobFacts
    gpus_held: int
    series: list[GpuSeries]
    expected: set[str]


def _clip(value: float) -> float:
    return max(0.0, min(100.0, value))


def _gpu(rng: random.Random, key: str, start: datetime, rows: list[tuple[float, float, float]],
         total_gib: float = 80) -> GpuSeries:
    """rows: (mean %, peak %, memory GiB) per minute; 2 % of the samples are lost."""
    points = [Point(start + i * MINUTE, start + (i + 1) * MINUTE, round(_clip(u), 2),
                    round(_clip(max(u, p)), 2), int(m * GIB), (60 + 3 * u) * 60)
              for i, (u, p, m) in enumerate(rows) if rng.random() >= 0.02]
    return GpuSeries(key, int(total_gib * GIB), points)


def _busy(rng, minutes, mean=75.0, memory=40.0):
    rows = []
    for _ in range(minutes):
        dip = rng.random() < 0.02  # a checkpoint: a minute at 0
        u = 0.0 if dip else _clip(rng.gauss(mean, 8))
        rows.append((u, _clip(u + rng.uniform(0, 10)), memory + rng.uniform(-2, 2)))
    return rows


def _idle(rng, minutes, memory=0.0):
    return [(0.0, 0.0, memory) for _ in range(minutes)]


def _job(rng, behaviour, start, minutes, per_gpu, expected, **facts) -> BenchJob:
    series = [_gpu(rng, f"n{rng.randrange(1000)}/{i}", start, rows)
              for i, rows in enumerate(per_gpu)]
    return BenchJob(behaviour, JobFacts(start=start, end=start + minutes * MINUTE, **facts),
                    len(per_gpu), series, expected)


def _healthy(rng, start):
    minutes, gpus = rng.randint(30, 600), rng.choice([1, 2, 4, 8])
    staging = rng.randint(5, 20) if rng.random() < 0.3 else 0  # data staged first
    per_gpu = [_idle(rng, staging, 2) + _busy(rng, minutes - staging, rng.uniform(45, 95))
               for _ in range(gpus)]
    return _job(rng, "healthy", start, minutes, per_gpu, set())


def _n_of_m(rng, start):
    minutes, gpus = rng.randint(30, 600), rng.choice([1, 2, 4, 8])
    unused = rng.randint(1, gpus) if gpus > 1 else 1
    per_gpu = ([_busy(rng, minutes) for _ in range(gpus - unused)]
               + [_idle(rng, minutes, rng.choice([0.0, 0.5])) for _ in range(unused)])
    return _job(rng, "n_of_m_idle", start, minutes, per_gpu, {"gpus_unused"})


def _burst_on_idle(rng, start):
    """N of M unused, but an unused GPU ran a brief burst (a test kernel, nvidia-smi's own):
    it still counts as unused when the burst is under 1 % of the job."""
    minutes, gpus = rng.randint(30, 600), rng.choice([2, 4, 8])
    unused = rng.randint(1, gpus - 1)
    burst = rng.randint(1, 3)
    per_gpu = ([_busy(rng, minutes) for _ in range(gpus - unused)]
               + [_idle(rng, 5) + [(100.0, 100.0, 1.0)] * burst + _idle(rng, minutes - 5 - burst)
                  for _ in range(unused)])
    return _job(rng, "burst_on_idle", start, minutes, per_gpu, {"gpus_unused"})


def _memory_held(rng, start):
    minutes, gpus = rng.randint(30, 600), rng.choice([1, 2, 4])
    held = rng.randint(1, gpus)
    per_gpu = ([_busy(rng, minutes) for _ in range(gpus - held)]
               + [_idle(rng, minutes, rng.uniform(4, 60)) for _ in range(held)])
    return _job(rng, "memory_held_idle", start, minutes, per_gpu, {"memory_held_idle"})


def _input_bound(rng, start):
    minutes, gpus = rng.randint(30, 600), rng.choice([1, 2, 4])
    per_gpu = [[(rng.uniform(15, 45), rng.uniform(85, 100), 30.0) for _ in range(minutes)]
               for _ in range(gpus)]
    return _job(rng, "input_bound", start, minutes, per_gpu, {"input_bound"})


def _short(rng, start):
    minutes = rng.randint(1, 4)
    return _job(rng, "short", start, minutes, [_busy(rng, minutes)], {"short_job"})


def _over_limit(rng, start):
    minutes = rng.randint(10, 120)
    return _job(rng, "over_limit", start, minutes, [_busy(rng, minutes)], {"time_limit_far"},
                time_limit_s=minutes * 60 * rng.randint(12, 48))


def _mig_sized(rng, start):
    minutes = rng.randint(30, 600)
    means = [_clip(rng.gauss(7, 3)) for _ in range(minutes)]
    rows = [(u, u + rng.uniform(0, 5), rng.uniform(1, 8)) for u in means]
    return _job(rng, "mig_sized", start, minutes, [rows], {"mig_sized"})


def _interactive_idle(rng, start):
    minutes = rng.randint(9 * 60, 16 * 60)
    rows = []
    for _ in range(minutes):  # someone types now and then
        u = rng.uniform(30, 70) if rng.random() < 0.08 else rng.uniform(0, 2)
        rows.append((u, u, 20.0))
    return _job(rng, "interactive_idle", start, minutes, [rows], {"interactive_idle"},
                interactive=True)


def _idle_tail(rng, start):
    work, tail, gpus = rng.randint(30, 400), rng.randint(40, 180), rng.choice([1, 2, 4])
    per_gpu = [_busy(rng, work) + _idle(rng, tail, 40) for _ in range(gpus)]
    return _job(rng, "idle_tail", start, work + tail, per_gpu, {"idle_tail"})


def _low_util(rng, start):
    minutes, gpus = rng.randint(30, 600), rng.choice([2, 4])
    per_gpu = [[(u, u + rng.uniform(0, 5), 30.0)
                for u in (_clip(rng.gauss(8, 3)) for _ in range(minutes))] for _ in range(gpus)]
    return _job(rng, "low_utilization", start, minutes, per_gpu, {"low_utilization"})


BEHAVIOURS = {
    _healthy: 40, _n_of_m: 6, _burst_on_idle: 2, _memory_held: 6, _input_bound: 8, _short: 6,
    _over_limit: 6, _mig_sized: 8, _interactive_idle: 4, _idle_tail: 8, _low_util: 6,
}


def workload(*, jobs: int = 3000, seed: int = 32) -> list[BenchJob]:
    """`jobs` jobs drawn by the weights of BEHAVIOURS (healthy: 40 %)."""
    rng = random.Random(seed)
    makers, weights = list(BEHAVIOURS), list(BEHAVIOURS.values())
    return [rng.choices(makers, weights)[0](rng, T0 + i * MINUTE) for i in range(jobs)]


@dataclass
class RunningJob:
    """A job still running at the end of its series: `zero_from` is when its GPUs truly
    stopped working for good (None: they never do), `threshold_s` the one that applies."""

    behaviour: str
    start: datetime
    minutes: int
    series: list[GpuSeries]
    zero_from: datetime | None
    threshold_s: int


def _running(rng, behaviour, start, per_gpu, zero_minute, threshold_s) -> RunningJob:
    series = [_gpu(rng, f"r{rng.randrange(1000)}/{i}", start, rows)
              for i, rows in enumerate(per_gpu)]
    zero = None if zero_minute is None else start + zero_minute * MINUTE
    return RunningJob(behaviour, start, len(per_gpu[0]), series, zero, threshold_s)


def _pauses(rng, minutes):
    """Work with checkpoints (1-5 min at 0) and one long pause of 20-40 min (an evaluation
    on the CPU): never an hour at zero."""
    rows = _busy(rng, minutes)
    pause = rng.randint(20, 40)
    at = rng.randint(0, max(0, minutes - pause))
    rows[at:at + pause] = _idle(rng, pause, 30)
    return rows


def running_workload(*, jobs: int = 400, seed: int = 32, warn_s: int = 3600,
                     staging_s: int = 7200) -> list[RunningJob]:
    """Running jobs: healthy ones (staging first, pauses, bursty input) and ones that stop
    using their GPUs (after working, before ever starting, behind a dummy kernel every ten
    minutes, holding memory), each observed until 30 minutes after its warning is due."""
    rng = random.Random(seed)
    out = []
    for i in range(jobs):
        start, kind = T0 + i * MINUTE, rng.choice(["healthy", "pauses", "bursty", "stopped",
                                                   "never_started", "dummy_load",
                                                   "memory_hold"])
        gpus = rng.choice([1, 2, 4])
        if kind in ("healthy", "pauses", "bursty"):
            minutes, staging = rng.randint(120, 300), rng.randint(0, 30)
            make = {"healthy": lambda m: _busy(rng, m), "pauses": lambda m: _pauses(rng, m),
                    "bursty": lambda m: [(100.0 if k % 2 else 0.0, 100.0, 30.0)
                                         for k in range(m)]}[kind]
            per_gpu = [_idle(rng, staging, 1) + make(minutes - staging) for _ in range(gpus)]
            out.append(_running(rng, kind, start, per_gpu, None, warn_s))
        elif kind == "never_started":
            minutes = staging_s // 60 + 30
            out.append(_running(rng, kind, start, [_idle(rng, minutes) for _ in range(gpus)],
                                0, staging_s))
        else:
            work = rng.randint(20, 120)
            minutes = work + warn_s // 60 + 30
            idle = minutes - work
            if kind == "dummy_load":
                tail = [(100.0, 100.0, 1.0) if k % 10 == 9 else (0.0, 0.0, 1.0)
                        for k in range(idle)]
            else:
                tail = _idle(rng, idle, 40 if kind == "memory_hold" else 0)
            out.append(_running(rng, kind, start, [_busy(rng, work) + tail
                                                   for _ in range(gpus)], work, warn_s))
    return out
