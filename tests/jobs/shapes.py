"""Series of known behaviour for the job analysis (tests and bench/jobs.py): one sample per
minute per GPU, as the agent sends them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuquota.jobs.analysis import GIB, GpuSeries, JobFacts, Point

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def series(key: str, utils: list[float], *, memory_gib: float = 20, total_gib: float = 80,
           peaks: list[float] | None = None, start: datetime = T0) -> GpuSeries:
    points = [Point(start + timedelta(minutes=i), start + timedelta(minutes=i + 1), u,
                    peaks[i] if peaks else u, int(memory_gib * GIB) if u or memory_gib else 0,
                    300.0 * 60 if u else 60.0 * 60)
              for i, u in enumerate(utils)]
    return GpuSeries(key, int(total_gib * GIB), points)


def facts(minutes: int, **kw) -> JobFacts:
    return JobFacts(start=T0, end=T0 + timedelta(minutes=minutes), **kw)
