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
