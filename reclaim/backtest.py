"""The policy backtest: "if this policy had run over the last N days", on the real
history (the hourly rollups and the assignments as they happened). Evaluated at every
whole hour: a GPU found idle over the look-back is recommended, released at the end
of the grace unless busy during it; what it would have returned runs to the end of
its assignment as it really was, and a **false reclaim** is a released GPU that was
busy again (at least `grace_busy_s`) before then. Any rule of `Policy.rule`: under
"evidence" an hour holds no process and no memory when its rollup says so; under
"guarded" the guards of `reclaim/guards.py` read the teams' busy history from the
rollups as the evaluation does. `rules_backtest` runs every rule on the same history:
each rule's false share. Hour granularity: idle reclaim only (right-size needs
per-minute concurrency, which the rollups do not keep; see the evaluation). Four
queries (six under "guarded": the teams' history and the loans)."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import F, Q
from django.utils import timezone

from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import hour_floor
from gpuquota.reservations.models import Assignment, Loan
from gpuquota.usage.models import GpuHourUsage
from reclaim.conf import GUARDED, RULES, SPEC, Policy, grace_busy_s
from reclaim.guards import (
    Candidate,
    GuardInputs,
    history_span,
    team_guards,
    team_histories,
)
from reclaim.savings import spans_amount

HOUR = 3600
MAX_DAYS = 90
NOTHING = (0, 0, 0, 0, 0, 0)


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
    history_from = start - policy.lookbacks[-1]
    assignments = list(Assignment.objects.filter(
        assigned_from__lt=end, assigned_until__gt=history_from,
        reservation__status__in=["active", "ended"],
    ).exclude(assigned_until=F("assigned_from")).values(
        "id", "gpu_id", "reservation_id", "reservation__team__slug", "assigned_from",
        "assigned_until", "reservation__start", "reservation__approved_at",
        "reservation__gpu_class_id", "reservation__team_id"))
    for a in assignments:
        a["charged_h"] = -(-int(max(a["assigned_from"], a["reservation__start"],
                                    a["reservation__approved_at"] or a["reservation__start"]
                                    ).timestamp()) // HOUR)
        a["until_s"] = int(a["assigned_until"].timestamp())
    guards = None
    if policy.rule == GUARDED:
        guards = _guard_history(assignments, since=start - history_span(policy)
                                - timedelta(hours=1), until=end)
    replay = _Replay(policy=policy, hours=_hours(assignments, since=history_from, until=end),
                     assignments=assignments, guards=guards)
    for t in range(_h(start), _h(end)):
        replay.step(t)
    return BacktestResult(policy, start, end,
                          sorted(replay.recs, key=lambda r: r.recommended_at))


def rules_backtest(*, policy: Policy, days: int, now: datetime | None = None
                   ) -> dict[str, BacktestResult]:
    """`policy_backtest` of every rule with the thresholds of `policy`, on the same
    history (what a simulation or an admin compares: each rule's false share)."""
    now = now or timezone.now()
    return {rule: policy_backtest(policy=policy.override(rule=rule), days=days, now=now)
            for rule in RULES}


def _guard_history(assignments: list[dict], *, since: datetime, until: datetime
                   ) -> "_GuardHistory":
    teams = {a["reservation__team_id"] for a in assignments}
    loans: dict[int, list[tuple[int, int | None]]] = defaultdict(list)
    for gpu_id, lent_from, returned_at in Loan.objects.filter(
            Q(returned_at__isnull=True) | Q(returned_at__gt=since), lent_from__lt=until,
            gpu_id__in={a["gpu_id"] for a in assignments},
    ).values_list("gpu_id", "lent_from", "returned_at"):
        loans[gpu_id].append((int(lent_from.timestamp()),
                              None if returned_at is None else int(returned_at.timestamp())))
    return _GuardHistory(histories=team_histories(team_ids=teams, since=since, until=until),
                         loans=dict(loans))


@dataclass
class _GuardHistory:
    """What the team guards read over the whole backtest: the teams' history and the
    loans (GPU → [(lent from, returned at or None)], epoch seconds)."""

    histories: dict
    loans: dict[int, list[tuple[int, int | None]]]

    def lent_at(self, t: int) -> set[int]:
        at = t * HOUR
        return {g for g, spans in self.loans.items()
                if any(a <= at and (b is None or b > at) for a, b in spans)}


def _hours(assignments: list[dict], *, since: datetime, until: datetime
           ) -> dict[int, dict[int, tuple]]:
    """Per assignment, per epoch hour: (covered, busy, failed, memory, processes,
    utilization-weighted seconds) from its rollups."""
    hours: dict[int, dict[int, tuple]] = defaultdict(dict)
    for row in GpuHourUsage.objects.filter(
        kind=GpuHourUsage.Kind.RESERVED, hour__gte=since, hour__lt=until,
        assignment_id__in=[a["id"] for a in assignments],
    ).values_list("assignment_id", "hour", "covered_s", "busy_s", "failed",
                  "memory_used_bytes_max", "process_count", "util_weighted"):
        assignment_id, hour, covered, busy, failed, memory, processes, util = row
        c, b, f, m, n, u = hours[assignment_id].get(_h(hour), NOTHING)
        if failed:
            hours[assignment_id][_h(hour)] = (c, b, f + covered, m, n, u)
        else:
            hours[assignment_id][_h(hour)] = (c + covered, b + busy, f, max(m, memory or 0),
                                              n + processes, u + util)
    return hours


def _idle_over(per_hour: dict, t: int, hours: int, policy: Policy, *, empty: bool,
               quiet: bool = False) -> bool:
    """Idle over the `hours` before t; `empty`: no process and no memory held either;
    `quiet`: and not one busy second nor any utilization (the guarded rule's signals)."""
    covered = busy = failed = memory = processes = util = 0
    for h in range(t - hours, t):
        c, b, f, m, n, u = per_hour.get(h, NOTHING)
        covered, busy, failed, util = covered + c, busy + b, failed + f, util + u
        memory, processes = max(memory, m), processes + n
    judged = hours * HOUR - failed
    if empty and (processes or memory > policy.empty_memory_bytes):
        return False
    if quiet and (busy or util):
        return False
    return bool(judged > 0 and covered >= policy.min_coverage * judged and covered
                and busy < policy.idle_busy_fraction * covered)


def _idle(per_hour: dict, t: int, charged_h: int, policy: Policy) -> bool:
    """The rule of `policy` at hour t, on the windows the assignment has run for."""
    def h(lookback: timedelta) -> int:
        return int(lookback.total_seconds()) // HOUR

    if policy.rule == SPEC:
        return _idle_over(per_hour, t, h(policy.lookback), policy, empty=False)
    if policy.rule == GUARDED:
        return _idle_over(per_hour, t, h(policy.lookback), policy, empty=True, quiet=True)
    return any(charged_h <= t - h(lb) and _idle_over(per_hour, t, h(lb), policy, empty=empty)
               for lb, empty in ((policy.empty_lookback, True), (policy.held_lookback, False)))


class _Replay:
    """Every reservation hour by hour, all of them at each hour (the team guards count
    what a team holds across its reservations): GPUs found idle are recommended; a GPU
    released is gone for the rest of the replay; one skipped (busy during the grace) stays
    and may be recommended again once the grace has ended, as the evaluation does after a
    recommendation that closed with its GPUs kept."""

    def __init__(self, *, policy: Policy, hours: dict, assignments: list[dict],
                 guards: _GuardHistory | None) -> None:
        self.policy, self.hours, self.guards = policy, hours, guards
        self.by_reservation: dict[int, list[dict]] = defaultdict(list)
        for a in assignments:
            self.by_reservation[a["reservation_id"]].append(a)
        self.first = {rid: min(a["charged_h"] for a in rows)
                      for rid, rows in self.by_reservation.items()}
        self.lookback_h = int(policy.shortest.total_seconds()) // HOUR
        self.grace_s = int(policy.grace.total_seconds())
        self.threshold = grace_busy_s()
        self.gone: set[int] = set()
        self.again: dict[int, int] = {}  # skipped: the hour it may be recommended again
        self.recs: list[BacktestReclaim] = []

    def _held(self, a: dict, t: int) -> bool:
        return a["id"] not in self.gone and a["charged_h"] <= t and a["until_s"] > t * HOUR

    def step(self, t: int) -> None:
        idle = {rid: [a for a in rows if self._held(a, t) and self.again.get(a["id"], t) <= t
                      and a["charged_h"] <= t - self.lookback_h
                      and _idle(self.hours.get(a["id"], {}), t, a["charged_h"], self.policy)]
                for rid, rows in self.by_reservation.items()
                if t >= self.first[rid] + self.lookback_h}
        if self.policy.rule == GUARDED:
            idle = self._guarded(idle, t)
        for rid, found in idle.items():
            if found:
                self.recs.append(self._recommend(self.by_reservation[rid], found, t))

    def _guarded(self, idle: dict[int, list[dict]], t: int) -> dict[int, list[dict]]:
        candidates = [Candidate(rid, a["gpu_id"], a["reservation__team_id"],
                                a["reservation__gpu_class_id"])
                      for rid in sorted(idle) for a in sorted(idle[rid], key=lambda a: a["gpu_id"])]
        if not candidates:
            return idle
        held: dict[tuple[int, int], int] = defaultdict(int)
        for rows in self.by_reservation.values():
            for a in rows:
                if self._held(a, t):
                    held[(a["reservation__team_id"], a["reservation__gpu_class_id"])] += 1
        refused = {(c.reservation_id, c.gpu_id) for c in team_guards(
            candidates=candidates, t=t, policy=self.policy, inputs=GuardInputs(
                held=held, histories=self.guards.histories,
                lent=self.guards.lent_at(t)))}
        return {rid: [a for a in found if (rid, a["gpu_id"]) not in refused]
                for rid, found in idle.items()}

    def _recommend(self, rows: list[dict], idle: list[dict], t: int) -> BacktestReclaim:
        release_s = t * HOUR + self.grace_s
        rec = BacktestReclaim(
            reservation_id=rows[0]["reservation_id"], team=rows[0]["reservation__team__slug"],
            gpu_class_id=rows[0]["reservation__gpu_class_id"],
            recommended_at=datetime.fromtimestamp(t * HOUR, tz=UTC),
            released_at=datetime.fromtimestamp(release_s, tz=UTC), gpu_ids=[])
        for a in idle:
            rec.gpu_ids.append(a["gpu_id"])
            per_hour = self.hours.get(a["id"], {})
            grace_busy = sum(per_hour.get(h, NOTHING)[1]
                             for h in range(t, -(-release_s // HOUR)))
            if grace_busy >= self.threshold or a["until_s"] <= release_s:
                rec.skipped_gpu_ids.append(a["gpu_id"])
                self.again[a["id"]] = -(-release_s // HOUR)
                continue
            self.gone.add(a["id"])
            rec.returned_by_gpu[a["gpu_id"]] = a["until_s"] - release_s
            rec.returned_s += a["until_s"] - release_s
            later_busy = sum(v[1] for h, v in per_hour.items() if h * HOUR >= release_s)
            if later_busy >= self.threshold:
                rec.false_gpu_ids.append(a["gpu_id"])
        return rec
