"""The guards of the `guarded` rule (docs/reclaim.md, "Hard reclaim"): what says a GPU
found idle must not be taken back all the same. Read from the hourly rollups and shared
by the evaluation and the backtest, so the backtest measures what the evaluation does.

- **Two signals** (`signals_refusal`): over the look-back, no process and at most
  `empty_memory_bytes` held, AND no busy second and no utilization at all. An
  inference service below the busy threshold that still serves holds a process and
  memory at a low, non-zero utilization: `serving`.
- **Recurring use** (`pattern`): the GPUs of the class the team kept busy at once in a
  slot that recurs (the same hour of the week in `pattern_min_weeks` of the last
  `pattern_weeks` weeks, or the same hour of the day on `pattern_min_days` of the last
  `pattern_days` days) stay with it: only the GPUs it holds beyond that demand go.
- **Usual gap** (`gap`): the GPU has been silent no longer than `gap_factor` times the
  longest silence the team came back from on it within the last `pattern_weeks` weeks
  (sweeps in waves, a notebook's owner who returns after days, weekends).
- **Debugging gap** (`retry_gap`): the team's last run on the GPU ended less than
  `retry_window` ago after less than `retry_short_run` (a job that failed early), and
  the team has been busy on another GPU since: it is debugging and will resubmit.
- **History gate** (`history`): the guards above learn from the team's history; until the
  team has `history_days` days of samples of the class (hours with a reported, unfailed
  second of one of its GPUs of the class, in reservations or not, within the guards'
  look-back), none of its GPUs of the class goes.
- **Lent** (`lent`): a GPU lent now (an open loan) is already at work for borrowers;
  reclaiming it would cut their work and end the lending credit.
"""

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q, Sum

from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.usage.models import GpuHourUsage
from reclaim.conf import Policy, grace_busy_s

HOUR = 3600
WEEK_H, DAY_H = 168, 24
SERVING, HELD, BUSY = "serving", "held", "busy"
PATTERN, GAP, RETRY_GAP = "pattern", "gap", "retry_gap"
HISTORY, LENT = "history", "lent"
#: What each guard says, in the words the evidence shows admins and leads.
REASONS = {
    SERVING: "serving: a process holds memory at a low, non-zero utilization",
    HELD: "held: a process or memory is held, its owner may come back to it",
    BUSY: "busy: some busy seconds or utilization in the window",
    PATTERN: "recurring use: the team keeps this many GPUs of the class busy at this hour",
    GAP: "usual gap: the team came back after silences this long on this GPU",
    RETRY_GAP: "debugging gap: its last run failed early and the team works on another GPU",
    LENT: "lent now: lending already puts it to work",
}


@dataclass(frozen=True)
class Refusal:
    """A guard that kept a GPU found idle, and why, in words."""

    guard: str
    reason: str


def refusal(guard: str) -> Refusal:
    return Refusal(guard, REASONS[guard])


def hour_index(value: datetime) -> int:
    return int(value.timestamp()) // HOUR


@dataclass
class TeamHistory:
    """What a team's GPUs reported: the GPU-hours it kept busy (at least `grace_busy_s`,
    reserved or not), epoch hour → {GPU id: its class id}, and the hours each GPU reported
    an unfailed second for it (`reported`; its class in `classes`). The sorted indexes the
    guards search are built once, on first use (a backtest asks at every hour)."""

    busy: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    reported: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    classes: dict[int, int] = field(default_factory=dict)
    _counts: dict[tuple[int, int], int] | None = None
    _hours: list[int] | None = None
    _by_gpu: dict[int, list[int]] | None = None
    _by_class: dict[int, list[int]] | None = None
    _run_starts: dict[int, list[int]] | None = None

    def busy_count(self, hour: int, gpu_class_id: int) -> int:
        if self._counts is None:
            self._counts = defaultdict(int)
            for h, gpus in self.busy.items():
                for class_id in gpus.values():
                    self._counts[(h, class_id)] += 1
        return self._counts.get((hour, gpu_class_id), 0)

    def hours(self) -> list[int]:
        """Every hour the team kept some GPU busy, sorted."""
        if self._hours is None:
            self._hours = sorted(h for h, gpus in self.busy.items() if gpus)
        return self._hours

    def gpu_hours(self, gpu_id: int) -> list[int]:
        """The hours the team kept this GPU busy, sorted."""
        if self._by_gpu is None:
            self._by_gpu = defaultdict(list)
            for h in self.hours():
                for g in self.busy[h]:
                    self._by_gpu[g].append(h)
        return self._by_gpu.get(gpu_id, [])

    def gpu_hours_between(self, gpu_id: int, start: int, end: int) -> list[int]:
        hours = self.gpu_hours(gpu_id)
        return hours[bisect_left(hours, start):bisect_left(hours, end)]

    def busy_between(self, start: int, end: int) -> bool:
        """Some GPU busy in [start, end)."""
        hours = self.hours()
        i = bisect_left(hours, start)
        return i < len(hours) and hours[i] < end

    def reporting_since(self, gpu_id: int, t: int) -> int | None:
        """The first hour of the unbroken stretch of hours the GPU reported for the team
        up to hour t - 1; None when it did not report in hour t - 1."""
        if self._run_starts is None:
            self._run_starts = {}
            for g, hours in self.reported.items():
                starts: list[int] = []
                for i, h in enumerate(hours):
                    starts.append(starts[-1] if i and hours[i - 1] == h - 1 else h)
                self._run_starts[g] = starts
        hours = self.reported.get(gpu_id, [])
        i = bisect_left(hours, t) - 1
        return self._run_starts[gpu_id][i] if i >= 0 and hours[i] == t - 1 else None

    def sampled_between(self, gpu_class_id: int, start: int, end: int) -> int:
        """The hours of [start, end) in which some GPU of the class reported for the team."""
        if self._by_class is None:
            by_class: dict[int, set[int]] = defaultdict(set)
            for gpu_id, hours in self.reported.items():
                by_class[self.classes[gpu_id]].update(hours)
            self._by_class = {c: sorted(hours) for c, hours in by_class.items()}
        hours = self._by_class.get(gpu_class_id, [])
        return bisect_left(hours, end) - bisect_left(hours, start)


def history_span(policy: Policy) -> timedelta:
    """How far back the guards read, before the hour they judge."""
    return max(timedelta(weeks=policy.pattern_weeks), timedelta(days=policy.pattern_days),
               policy.retry_window)


def history_days(history: TeamHistory, *, gpu_class_id: int, t: int, policy: Policy) -> int:
    """Whole days of the team's samples of the class within the guards' look-back before
    hour t (hours in which one of its GPUs of the class reported an unfailed second)."""
    span_h = int(history_span(policy).total_seconds()) // HOUR
    return history.sampled_between(gpu_class_id, t - span_h, t) // DAY_H


def history_refusal(days: int, policy: Policy) -> Refusal | None:
    """The history gate: too few days of samples for the guards to judge, or None."""
    if days >= policy.history_days:
        return None
    return Refusal(HISTORY, f"not enough history: {days} of {policy.history_days} days")


def lent_gpu_ids(*, gpu_ids: set[int], at: datetime) -> set[int]:
    """The GPUs among `gpu_ids` lent at `at` (a loan open then), in one query."""
    return set(Loan.objects.filter(Q(returned_at__isnull=True) | Q(returned_at__gt=at),
                                   gpu_id__in=gpu_ids, lent_from__lte=at)
               .values_list("gpu_id", flat=True))


def team_histories(*, team_ids: set[int], since: datetime, until: datetime
                   ) -> dict[int, TeamHistory]:
    """The history of these teams over [since, until), in one query."""
    found: dict[int, TeamHistory] = defaultdict(TeamHistory)
    if not team_ids:
        return found
    rows = (GpuHourUsage.objects.filter(team_id__in=team_ids, hour__gte=since, hour__lt=until,
                                        failed=False, covered_s__gt=0)
            .values_list("team_id", "gpu_id", "gpu_class_id", "hour")
            .annotate(busy=Sum("busy_s")).order_by("team_id", "gpu_id", "hour"))
    threshold = grace_busy_s()
    for team_id, gpu_id, class_id, hour, busy in rows:
        history, h = found[team_id], hour_index(hour)
        history.classes[gpu_id] = class_id
        history.reported[gpu_id].append(h)
        if busy >= threshold:
            history.busy[h][gpu_id] = class_id
    return found


def signals_refusal(*, busy_s: int, util_positive: bool, process_count: int,
                    memory_bytes: int | None, policy: Policy) -> str | None:
    """Why the two signals do not agree on an idle GPU over the window, or None."""
    if process_count or (memory_bytes or 0) > policy.empty_memory_bytes:
        return SERVING if util_positive else HELD
    if busy_s or util_positive:
        return BUSY
    return None


def _kth_largest(values: list[int], k: int) -> int:
    return sorted(values, reverse=True)[k - 1] if len(values) >= k else 0


def recurring_demand(history: TeamHistory, *, gpu_class_id: int, t: int,
                     policy: Policy) -> int:
    """GPUs of the class the team kept busy at once in a slot recurring before hour t:
    reached in `pattern_min_weeks` of the last `pattern_weeks` weeks at the same hour
    of the week, or on `pattern_min_days` of the last `pattern_days` days at the same
    hour of the day."""
    def demand(period_h: int, periods: int, at_least: int) -> int:
        return max(_kth_largest([history.busy_count(t - o - period_h * k, gpu_class_id)
                                 for k in range(periods)], at_least)
                   for o in range(1, period_h + 1))

    return max(demand(WEEK_H, policy.pattern_weeks, policy.pattern_min_weeks),
               demand(DAY_H, policy.pattern_days, policy.pattern_min_days))


def in_retry_gap(history: TeamHistory, *, gpu_id: int, t: int, policy: Policy) -> bool:
    """The team's last run on the GPU before hour t ended within `retry_window` after
    less than `retry_short_run`, and the team kept another GPU busy since."""
    window_h = int(policy.retry_window.total_seconds()) // HOUR
    hours = history.gpu_hours_between(gpu_id, t - window_h - 1 - int(
        policy.retry_short_run.total_seconds()) // HOUR, t)
    if not hours or hours[-1] < t - window_h:
        return False
    last = first = hours[-1]
    for h in reversed(hours[:-1]):
        if h != first - 1:
            break
        first = h
    if (last - first + 1) * HOUR >= policy.retry_short_run.total_seconds():
        return False
    # the GPU is not busy after `last`: any busy hour of the team since is another GPU's
    return history.busy_between(last + 1, t)


def in_usual_gap(history: TeamHistory, *, gpu_id: int, t: int, policy: Policy) -> bool:
    """The GPU's silence before hour t is at most `gap_factor` times the longest silence
    between two of the team's busy hours on it within the last `pattern_weeks` weeks. Its
    silence runs from its last busy hour or, if later, from when it reported again after
    failing or going unreported: its owner may have come back meanwhile, unseen."""
    busy = history.gpu_hours_between(gpu_id, t - WEEK_H * policy.pattern_weeks, t)
    if len(busy) < 2:
        return False
    longest = max(b - a - 1 for a, b in zip(busy, busy[1:], strict=False))
    since = max(busy[-1] + 1, history.reporting_since(gpu_id, t) or t)
    return longest > 0 and t - since <= policy.gap_factor * longest


@dataclass(frozen=True)
class Candidate:
    """A GPU idle by both signals, of a reservation of a team's class."""

    reservation_id: int
    gpu_id: int
    team_id: int
    gpu_class_id: int


@dataclass
class GuardInputs:
    """What the team guards read at one hour: per (team, class) the GPUs held; per team
    its history; the GPUs lent."""

    held: dict[tuple[int, int], int]
    histories: dict[int, TeamHistory]
    lent: set[int]


def team_guards(*, candidates: list[Candidate], inputs: GuardInputs, t: int, policy: Policy
                ) -> dict[Candidate, Refusal]:
    """The candidates the team guards refuse at hour t, with the refusal: lent now, too
    little history, a debugging gap, a usual gap, else beyond what the team holds over its
    recurring demand. The others may go, in the order given."""
    refused: dict[Candidate, Refusal] = {}
    room: dict[tuple[int, int], int] = {}
    for c in candidates:
        history = inputs.histories.get(c.team_id, TeamHistory())
        key = (c.team_id, c.gpu_class_id)
        if key not in room:
            room[key] = inputs.held.get(key, 0) - recurring_demand(
                history, gpu_class_id=c.gpu_class_id, t=t, policy=policy)
        gate = history_refusal(history_days(history, gpu_class_id=c.gpu_class_id, t=t,
                                            policy=policy), policy)
        if c.gpu_id in inputs.lent:
            refused[c] = refusal(LENT)
        elif gate is not None:
            refused[c] = gate
        elif in_retry_gap(history, gpu_id=c.gpu_id, t=t, policy=policy):
            refused[c] = refusal(RETRY_GAP)
        elif in_usual_gap(history, gpu_id=c.gpu_id, t=t, policy=policy):
            refused[c] = refusal(GAP)
        elif room[key] <= 0:
            refused[c] = refusal(PATTERN)
        else:
            room[key] -= 1
    return refused


def guards_at(*, candidates: list[Candidate], now: datetime, policy: Policy
              ) -> dict[Candidate, Refusal]:
    """`team_guards` at `now` on the stored history, the assignments and the loans in
    force: three queries."""
    teams = {c.team_id for c in candidates}
    if not teams:
        return {}
    t = hour_index(now)
    since = now - history_span(policy) - timedelta(hours=1)
    histories = team_histories(team_ids=teams, since=since, until=now)
    held: dict[tuple[int, int], int] = defaultdict(int)
    for team_id, class_id in Assignment.objects.filter(
            Q(reservation__team_id__in=teams), assigned_from__lte=now, assigned_until__gt=now,
            reservation__status=Reservation.Status.ACTIVE,
    ).values_list("reservation__team_id", "reservation__gpu_class_id"):
        held[(team_id, class_id)] += 1
    lent = lent_gpu_ids(gpu_ids={c.gpu_id for c in candidates}, at=now)
    return team_guards(candidates=candidates, t=t, policy=policy, inputs=GuardInputs(
        held=dict(held), histories=histories, lent=lent))
