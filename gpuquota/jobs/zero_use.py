"""The zero-use clock of a running job (docs/jobs.md, Zero-use warnings): pure, like
`analysis`, so the warning and the benchmark read it the same way.

What counts: the job is at zero while every GPU it holds is idle (a window under
`idle_util_pct`), whatever memory it holds (memory held at 0 % is not use). A busy stretch
(any GPU busy, windows less than a minute apart) stops the clock only if it lasts
`burst_s`: a brief burst, or a dummy kernel every few minutes, does not. Before the job's
first lasting stretch its GPUs may wait for data staged in: the threshold is then
`staging_s`, longer than `warn_s`. The clock runs from the end of the last lasting work to
the end of the last sample: time after the last sample is not counted (a silent agent warns
no one), but a sample lost inside that span counts as zero, as does a checkpoint's minute at
0 % just before the work stopped (the clock may start a few minutes early).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuquota.jobs.analysis import GpuSeries

JOIN = timedelta(seconds=60)  # busy windows this close form one stretch


@dataclass(frozen=True)
class ZeroUseRules:
    idle_util_pct: int = 1
    warn_s: int = 3600  # Job Defense Shield's first warning: 60 minutes at 0 %
    staging_s: int = 7200  # before the first lasting work: staging data in is allowed
    burst_s: int = 300  # a busy stretch shorter than this does not stop the clock


@dataclass(frozen=True)
class ZeroUse:
    since: datetime  # when the clock started: the end of the last lasting work, or the start
    seen_until: datetime  # how far the samples go
    worked: bool  # whether the job ever worked for `burst_s`
    threshold_s: int

    @property
    def idle_s(self) -> int:
        return max(0, int((self.seen_until - self.since).total_seconds()))

    @property
    def due(self) -> bool:
        return self.idle_s >= self.threshold_s

    @property
    def due_at(self) -> datetime:
        return self.since + timedelta(seconds=self.threshold_s)


def _busy_stretches(series: list[GpuSeries], start: datetime, now: datetime,
                    idle_util_pct: int) -> list[tuple[datetime, datetime]]:
    windows = sorted((max(p.start, start), min(p.end, now)) for s in series for p in s.points
                     if p.util_pct is not None and float(p.util_pct) >= idle_util_pct
                     and p.end > start and p.start < now)
    stretches: list[list[datetime]] = []
    for begin, end in windows:
        if stretches and begin <= stretches[-1][1] + JOIN:
            stretches[-1][1] = max(stretches[-1][1], end)
        else:
            stretches.append([begin, end])
    return [(b, e) for b, e in stretches]


def zero_use(*, series: list[GpuSeries], start: datetime, now: datetime,
             rules: ZeroUseRules | None = None) -> ZeroUse | None:
    """The job's zero-use clock now, or None when no sample has come since it started."""
    r = rules or ZeroUseRules()
    ends = [min(p.end, now) for s in series for p in s.points if p.end > start]
    if not ends:
        return None
    lasting = [(b, e) for b, e in _busy_stretches(series, start, now, r.idle_util_pct)
               if (e - b).total_seconds() >= r.burst_s]
    worked = bool(lasting)
    return ZeroUse(since=lasting[-1][1] if worked else start, seen_until=max(ends),
                   worked=worked, threshold_s=r.warn_s if worked else r.staging_s)
