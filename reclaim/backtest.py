"""The policy backtest: "if this policy had run over the last N days", on the real
history (the hourly rollups and the assignments as they happened). Evaluated at every
whole hour: a GPU found idle over the look-back is recommended, released at the end
of the grace unless busy during it; what it would have returned runs to the end of
its assignment as it really was, and a **false reclaim** is a released GPU that was
busy again (at least `grace_busy_s`) before then. Either rule of `Policy.rule`: under
"evidence" an hour holds no process and no memory when its rollup says so. Hour
granularity: idle reclaim only (right-size needs per-minute concurrency, which the
rollups do not keep; see the evaluation). Four queries."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F
from django.utils import timezone

from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import hour_floor
from gpuquota.reservations.models import Assignment
from gpuquota.usage.models import GpuHourUsage
from reclaim.conf import SPEC, Policy, grace_busy_s
from reclaim.savings import spans_amount

HOUR = 3600
MAX_DAYS = 90


@dataclass
class BacktestReclaim:
    reservation_id: int
    team: str
    gpu_class_id: int
    recommended_at: datetime
    released_at: datetime
    gpu_ids: list[int]
    returned_s: int = 0
    false_gpu_ids: list[int] = field(default_factory=list)
    skipped_gpu_ids: list[int] = field(default_factory=list)
    returned_by_gpu: dict[int, int] = field(default_factory=dict)


@dataclass
class BacktestResult:
    policy: Policy
    start: datetime
    end: datetime
    recommendations: list[BacktestReclaim]

    @property
    def gpus_released(self) -> int:
        return sum(len(r.gpu_ids) - len(r.skipped_gpu_ids) for r in self.recommendations)

    @property
    def gpu_hours_returned(self) -> Decimal:
        return Decimal(sum(r.returned_s for r in self.recommendations)) / HOUR

    @property
    def false_reclaims(self) -> int:
        return sum(len(r.false_gpu_ids) for r in self.recommendations)

    @property
    def false_reclaim_rate(self) -> Decimal:
        released = self.gpus_released
        return Decimal(self.false_reclaims) / released if released else Decimal(0)

    @property
    def savings_amount(self) -> Decimal:
        """What the returned GPU-hours would have cost at the reserved rates."""
        spans: dict[int, list] = defaultdict(list)
        for r in self.recommendations:
            at = int(r.released_at.timestamp())
            spans[r.gpu_class_id] += [(at, at + s) for s in r.returned_by_gpu.values()]
        return sum((spans_amount(gpu_class_id=c, spans=items).amount or Decimal(0)
                    for c, items in spans.items()), Decimal("0.00"))


def _h(value: datetime) -> int:
    return int(value.timestamp()) // HOUR


def policy_backtest(*, policy: Policy, days: int, now: datetime | None = None
                    ) -> BacktestResult:
    """What `policy` would have recommended and returned over the last `days` days."""
    if not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise DomainError(f"Backtest between 1 and {MAX_DAYS} days.", field="days")
    if any(lb.total_seconds() % HOUR or lb < timedelta(hours=1) for lb in policy.lookbacks):
        raise DomainError("The backtest's look-backs are whole hours.", field="lookback_hours")
    end = hour_floor(now or timezone.now())
    start = end - timedelta(days=days)
    lookback_h = int(policy.shortest.total_seconds()) // HOUR
    grace_s = int(policy.grace.total_seconds())
    history_from = start - policy.lookbacks[-1]
    assignments = list(Assignment.objects.filter(
        assigned_from__lt=end, assigned_until__gt=history_from,
        reservation__status__in=["active", "ended"],
    ).exclude(assigned_until=F("assigned_from")).values(
        "id", "gpu_id", "reservation_id", "reservation__team__slug", "assigned_from",
        "assigned_until", "reservation__start", "reservation__approved_at",
        "reservation__gpu_class_id"))
    hours: dict[int, dict[int, tuple[int, int, int]]] = defaultdict(dict)
    for row in GpuHourUsage.objects.filter(
        kind=GpuHourUsage.Kind.RESERVED, hour__gte=history_from, hour__lt=end,
        assignment_id__in=[a["id"] for a in assignments],
    ).values_list("assignment_id", "hour", "covered_s", "busy_s", "failed",
                  "memory_used_bytes_max", "process_count"):
        assignment_id, hour, covered, busy, failed, memory, processes = row
        c, b, f, m, n = hours[assignment_id].get(_h(hour), (0, 0, 0, 0, 0))
        if failed:
            hours[assignment_id][_h(hour)] = (c, b, f + covered, m, n)
        else:
            hours[assignment_id][_h(hour)] = (c + covered, b + busy, f, max(m, memory or 0),
                                              n + processes)
    recs = []
    by_reservation: dict[int, list[dict]] = defaultdict(list)
    for a in assignments:
        by_reservation[a["reservation_id"]].append(a)
        a["charged_h"] = -(-int(max(a["assigned_from"], a["reservation__start"],
                                    a["reservation__approved_at"] or a["reservation__start"]
                                    ).timestamp()) // HOUR)
        a["until_s"] = int(a["assigned_until"].timestamp())
    for rows in by_reservation.values():
        recs += _replay(rows, hours, start=_h(start), end=_h(end), lookback_h=lookback_h,
                        grace_s=grace_s, policy=policy)
    return BacktestResult(policy, start, end, sorted(recs, key=lambda r: r.recommended_at))


def _idle_over(per_hour: dict, t: int, hours: int, policy: Policy, *, empty: bool) -> bool:
    covered = busy = failed = memory = processes = 0
    for h in range(t - hours, t):
        c, b, f, m, n = per_hour.get(h, (0, 0, 0, 0, 0))
        covered, busy, failed = covered + c, busy + b, failed + f
        memory, processes = max(memory, m), processes + n
    judged = hours * HOUR - failed
    if empty and (processes or memory > policy.empty_memory_bytes):
        return False
    return bool(judged > 0 and covered >= policy.min_coverage * judged and covered
                and busy < policy.idle_busy_fraction * covered)


def _idle(per_hour: dict, t: int, charged_h: int, policy: Policy) -> bool:
    """The rule of `policy` at hour t, on the windows the assignment has run for."""
    def h(lookback: timedelta) -> int:
        return int(lookback.total_seconds()) // HOUR

    if policy.rule == SPEC:
        return _idle_over(per_hour, t, h(policy.lookback), policy, empty=False)
    return any(charged_h <= t - h(lb) and _idle_over(per_hour, t, h(lb), policy, empty=empty)
               for lb, empty in ((policy.empty_lookback, True), (policy.held_lookback, False)))


def _replay(rows: list[dict], hours: dict, *, start: int, end: int, lookback_h: int,
            grace_s: int, policy: Policy) -> list[BacktestReclaim]:
    """One reservation, hour by hour: GPUs found idle are recommended; a GPU released
    is gone for the rest of the replay."""
    recs: list[BacktestReclaim] = []
    gone: set[int] = set()
    threshold = grace_busy_s()
    first = min(a["charged_h"] for a in rows)
    for t in range(max(start, first + lookback_h), end):
        idle = [a for a in rows if a["id"] not in gone and a["charged_h"] <= t - lookback_h
                and a["until_s"] > t * HOUR and _idle(hours.get(a["id"], {}), t, a["charged_h"],
                                                      policy)]
        if not idle:
            continue
        release_s = t * HOUR + grace_s
        rec = BacktestReclaim(
            reservation_id=rows[0]["reservation_id"], team=rows[0]["reservation__team__slug"],
            gpu_class_id=rows[0]["reservation__gpu_class_id"],
            recommended_at=datetime.fromtimestamp(t * HOUR, tz=UTC),
            released_at=datetime.fromtimestamp(release_s, tz=UTC), gpu_ids=[])
        for a in idle:
            gone.add(a["id"])
            rec.gpu_ids.append(a["gpu_id"])
            per_hour = hours.get(a["id"], {})
            grace_busy = sum(per_hour.get(h, (0, 0, 0, 0, 0))[1]
                             for h in range(t, -(-release_s // HOUR)))
            if grace_busy >= threshold or a["until_s"] <= release_s:
                rec.skipped_gpu_ids.append(a["gpu_id"])
                continue
            rec.returned_by_gpu[a["gpu_id"]] = a["until_s"] - release_s
            rec.returned_s += a["until_s"] - release_s
            later_busy = sum(v[1] for h, v in per_hour.items() if h * HOUR >= release_s)
            if later_busy >= threshold:
                rec.false_gpu_ids.append(a["gpu_id"])
        recs.append(rec)
    return recs
