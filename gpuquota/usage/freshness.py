"""How fresh the rollups are: the instant before which every stored sample is counted in
the hourly rollups that the fleet, utilization and team pages read (issue 13: "the
fleet page says how fresh its figures are"; `/metrics` shows the outbox lag).

A stored sample (or any other change) marks its GPU-hour in the outbox in the same
transaction, and a mark keeps `marked_at` of the first change not rolled up yet (a re-mark
never moves it; the sweep removes the mark in the transaction that writes the rows). So
everything stored before the oldest pending `marked_at` is counted in the rollups; with
no mark pending, everything stored is.

While agents report, the open hour is always waiting for its next recompute: that is the
design (`USAGE_ROLLUP_FRESHNESS_S`), not a delay. The figures are *late* only when they lag
more than that bound; then the pages say so, with what waits.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from django.utils import timezone

from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.outbox.conf import rollup_freshness_s
from gpuquota.outbox.models import DirtyGpuHour


@dataclass(frozen=True)
class UsageFreshness:
    as_of: datetime  # every sample stored before this is counted in the rollups
    pending_gpu_hours: int  # GPU-hours waiting for their recompute
    now: datetime

    bound_s: int = 300  # the freshness promised: USAGE_ROLLUP_FRESHNESS_S

    @property
    def lag_s(self) -> int:
        return max(0, int((self.now - self.as_of).total_seconds()))

    @property
    def lag_text(self) -> str:
        return duration_text(self.lag_s)

    @property
    def bound_text(self) -> str:
        return duration_text(self.bound_s)

    @property
    def late(self) -> bool:
        """Behind by more than the freshness bound: something holds the recomputes up."""
        return self.lag_s > self.bound_s


def duration_text(seconds: int) -> str:
    """`45 s`, `5 min`, `2 h 10 min`: a lag as people say it."""
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def usage_freshness(*, since: datetime | None = None, until: datetime | None = None,
                    now: datetime | None = None) -> UsageFreshness:
    """As of when the rollups of the hours in [since, until) (default: from the current
    UTC month, what the pages show by default) count every stored sample, and how many of
    those GPU-hours wait for a recompute. One query."""
    now = now or timezone.now()
    if since is None:
        since = Period.month(now.year, now.month).start
    marks = DirtyGpuHour.objects.filter(hour__gte=hour_floor(since))
    if until is not None:
        marks = marks.filter(hour__lt=until)
    pending = marks.aggregate(count=Count("id"), oldest=Min("marked_at"))
    as_of = now
    if pending["oldest"] is not None:
        as_of = min(now, pending["oldest"])
    return UsageFreshness(as_of=as_of.replace(microsecond=0),
                          pending_gpu_hours=pending["count"], now=now,
                          bound_s=int(rollup_freshness_s()))
