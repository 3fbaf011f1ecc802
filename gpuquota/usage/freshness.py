"""How fresh the rollups are: the instant before which every stored sample is counted in
the hourly rollups that the fleet, utilization and team pages read (issue 13: "the
fleet page says how fresh its figures are"; `/metrics` shows the outbox lag).

A stored sample (or any other change) marks its GPU-hour in the outbox in the same
transaction. A mark made at `t` is due at `mark_due_at(t)`, which is at most
`t + USAGE_ROLLUP_FRESHNESS_S`, and a later mark keeps the earlier due time. So
a pending mark was first made no earlier than `due_at - freshness`. Before that
instant, everything stored is already counted in the rollups. With no mark
pending, the rollups count everything stored.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

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

    @property
    def lag_s(self) -> int:
        return max(0, int((self.now - self.as_of).total_seconds()))


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
    pending = marks.aggregate(count=Count("id"), due=Min("due_at"))
    as_of = now
    if pending["due"] is not None:
        as_of = min(now, pending["due"] - timedelta(seconds=rollup_freshness_s()))
    return UsageFreshness(as_of=as_of.replace(microsecond=0),
                          pending_gpu_hours=pending["count"], now=now)
