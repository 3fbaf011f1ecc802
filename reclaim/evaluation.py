"""What the policy finds on the reservations under evaluation at one instant (a read:
no writes). accounting.md, "Reclaim recommendations": idle GPUs (reclaim), the 95th
percentile of concurrency below the count (right-size), too little coverage to judge
(coverage warning); `Policy.rule` picks the look-back per GPU (conf.py), and under the
`guarded` rule the guards of `reclaim/guards.py` may refuse an idle GPU. The inputs of
all reservations are read together (`reclaim/inputs.py`), in a fixed number of
queries whatever their number."""

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Reservation
from gpuquota.usage.slots import concurrency_per_slot, nearest_rank_percentile
from reclaim.conf import GUARDED, SPEC, Policy
from reclaim.guards import Candidate, guards_at, refusal, signals_refusal
from reclaim.inputs import EvaluationInputs, evaluation_inputs
from reclaim.models import Recommendation
from reclaim.savings import Savings

K = Recommendation.Kind


@dataclass
class Finding:
    kind: str
    gpu_ids: list[int]
    evidence: dict
    target_count: int | None = None
    savings: Savings | None = None


@dataclass
class ReservationFindings:
    reservation: Reservation
    window: Period
    held_gpu_ids: list[int]
    findings: list[Finding] = field(default_factory=list)
    gpus: dict[str, dict] = field(default_factory=dict)  # GPU id → its evidence and state

    def of_kind(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)


def _classify(ev: dict, policy: Policy) -> str:
    """`idle`, `low_coverage`, `in_use` or `failed` (nothing to judge)."""
    if not ev["judged_s"]:
        return "failed"
    if Fraction(ev["covered_s"], ev["judged_s"]) < Fraction(policy.min_coverage):
        return "low_coverage"
    if Fraction(ev["busy_s"], ev["covered_s"]) < Fraction(policy.idle_busy_fraction):
        return "idle"
    return "in_use"


def _empty(ev: dict, policy: Policy) -> bool:
    """No process and (almost) no memory held all the window: nothing is running."""
    return not ev["process_count"] and (ev["memory_used_bytes_max"] or 0) <= \
        policy.empty_memory_bytes


def _judge(inputs: EvaluationInputs, rid: int, gpu_id: int, policy: Policy
           ) -> tuple[str, dict]:
    """The GPU's state and the evidence of the window that decided it. Under the
    evidence rule, a GPU idle over the base look-back that still holds memory or a
    process is `watched` (neither recommended nor right-sized) until the longer one."""
    evidence = {lb: inputs.evidence(rid, gpu_id, lb) for lb in policy.lookbacks
                if inputs.ran_at_least(rid, lb)}
    base = evidence.get(policy.lookback)
    base_state = _classify(base, policy) if base else None
    if policy.rule == SPEC:
        return base_state, base
    if policy.rule == GUARDED:
        return _two_signals(base_state, base, policy)
    short = evidence.get(policy.empty_lookback)
    if short and _classify(short, policy) == "idle" and _empty(short, policy):
        return "idle", {**short, "rule": "empty"}
    held = evidence.get(policy.held_lookback)
    if held and _classify(held, policy) == "idle":
        return "idle", {**held, "rule": "held"}
    if base_state == "idle":
        return "watched", base
    return base_state, base


def _two_signals(state: str | None, evidence: dict | None, policy: Policy
                 ) -> tuple[str | None, dict | None]:
    """The guarded rule on one GPU's window: idle only when no process, no memory, no
    busy second and no utilization agree; otherwise `guarded`, naming the signal."""
    if state != "idle":
        return state, evidence
    guard = signals_refusal(
        busy_s=evidence["busy_s"], process_count=evidence["process_count"],
        util_positive=bool(evidence["mean_util_gpu"]) and float(evidence["mean_util_gpu"]) > 0,
        memory_bytes=evidence["memory_used_bytes_max"], policy=policy)
    if guard is not None:
        return "guarded", {**evidence, "guard": guard, "reason": refusal(guard).reason}
    return "idle", {**evidence, "rule": GUARDED}


def findings_evaluate(*, reservations: list[Reservation], now: datetime, policy: Policy
                      ) -> dict[int, ReservationFindings]:
    """The policy's findings per reservation at `now`, per GPU it holds at `now`,
    failed time left out. A reservation is judged on the windows it has run for."""
    inputs = evaluation_inputs(reservations=reservations, now=now, policy=policy,
                               right_size_candidates=_right_size_candidates)
    judged = {r.id: _judged(r, inputs, policy) for r in reservations}
    if policy.rule == GUARDED:
        _team_guards_apply(reservations, judged, now=now, policy=policy)
    found = {r.id: _reservation(r, judged[r.id], inputs, policy) for r in reservations}
    if policy.rule == GUARDED:
        _right_size_guard(found, inputs, now=now, policy=policy)
    return found


def _right_size_guard(found: dict[int, ReservationFindings], inputs: EvaluationInputs, *,
                      now: datetime, policy: Policy) -> None:
    """Under the guarded rule a right-size takes back GPUs too: the team guards keep the
    ones they refuse (lent, too little history, the team's usual gaps or recurring use of
    that many GPUs at once), each with its guard and reason in its evidence; the target
    rises by as many, and a right-size left with no GPU goes."""
    sized = [(f, f.of_kind(K.RIGHT_SIZE)) for f in found.values()]
    sized = [(f, finding) for f, finding in sized if finding is not None]
    candidates = [Candidate(f.reservation.id, g, f.reservation.team_id,
                            f.reservation.gpu_class_id) for f, finding in sized
                  for g in finding.gpu_ids]
    refused = {(c.reservation_id, c.gpu_id): r for c, r in guards_at(
        candidates=candidates, now=now, policy=policy).items()}
    for f, finding in sized:
        kept = {g: refused[(f.reservation.id, g)] for g in finding.gpu_ids
                if (f.reservation.id, g) in refused}
        if not kept:
            continue
        for g, r in kept.items():
            f.gpus[str(g)].update(guard=r.guard, reason=r.reason)
        finding.gpu_ids = [g for g in finding.gpu_ids if g not in kept]
        if not finding.gpu_ids:
            f.findings.remove(finding)
            continue
        finding.target_count += len(kept)
        finding.savings = inputs.savings(f.reservation, finding.gpu_ids)


def _judged(reservation: Reservation, inputs: EvaluationInputs, policy: Policy) -> dict:
    judged = {g: _judge(inputs, reservation.id, g, policy)
              for g in inputs.held.get(reservation.id, [])}
    return {g: j for g, j in judged.items() if j[0] is not None}


def _team_guards_apply(reservations: list[Reservation], judged: dict[int, dict], *,
                       now: datetime, policy: Policy) -> None:
    """Turn the idle GPUs the team guards refuse into `guarded` ones, naming the guard
    and saying why (`reason`, shown to admins and leads)."""
    candidates = [Candidate(r.id, g, r.team_id, r.gpu_class_id) for r in reservations
                  for g, (state, _ev) in sorted(judged[r.id].items()) if state == "idle"]
    for c, refused in guards_at(candidates=candidates, now=now, policy=policy).items():
        judged[c.reservation_id][c.gpu_id] = ("guarded", {
            **judged[c.reservation_id][c.gpu_id][1], "guard": refused.guard,
            "reason": refused.reason})


def _reservation(reservation: Reservation, judged: dict, inputs: EvaluationInputs,
                 policy: Policy) -> ReservationFindings:
    window = Period(inputs.now - policy.lookback, inputs.now)
    held = inputs.held.get(reservation.id, [])
    result = ReservationFindings(reservation, window, held)
    if not judged:
        return result
    per_gpu = {str(g): {**ev, "state": state} for g, (state, ev) in judged.items()}
    result.gpus = per_gpu
    evidence = {"gpus": per_gpu, **inputs.edges(reservation.id, policy.lookback)}
    low = [g for g, (state, _ev) in judged.items() if state == "low_coverage"]
    idle = [g for g, (state, _ev) in judged.items() if state == "idle"]
    if low:
        result.findings.append(Finding(K.COVERAGE_WARNING, low, evidence))
    if idle:
        result.findings.append(Finding(K.RECLAIM, idle, evidence,
                                       savings=inputs.savings(reservation, idle)))
    watched = any(state in ("watched", "guarded") for state, _ev in judged.values())
    if not low and not watched and inputs.ran_at_least(reservation.id, policy.lookback):
        right = _right_size(rid=reservation.id, held=held, idle=idle, inputs=inputs,
                            window=window, policy=policy,
                            busy={g: ev["busy_s"] for g, (_s, ev) in judged.items()})
        if right is not None:
            target, gpus, concurrency = right
            result.findings.append(Finding(
                K.RIGHT_SIZE, gpus, {**evidence, "concurrency": concurrency},
                target_count=target, savings=inputs.savings(reservation, gpus)))
    return result


def _right_size_candidates(inputs: EvaluationInputs, policy: Policy) -> set[int]:
    """Reservations whose right-size the per-slot read must settle: more than one GPU
    kept, and per-hour busy seconds leaving room for enough slots below that count
    (a slot of a kept GPU short of 30 busy seconds has over 30 others, so an hour
    holds at most (3600 − busy) / 30 of them)."""
    window = Period(inputs.now - policy.lookback, inputs.now)
    slots = window.seconds // policy.slot_s
    rank = -(-policy.percentile * slots // 100)
    usage = inputs.usage[policy.lookback]
    hours = usage.whole_hours
    found = set()
    for rid, gpu_ids in inputs.held.items():
        if not inputs.ran_at_least(rid, policy.lookback):
            continue
        states = {g: _judge(inputs, rid, g, policy)[0] for g in gpu_ids}
        kept = [g for g, state in states.items() if state != "idle"]
        if len(kept) < 2 or {"low_coverage", "watched", "guarded"} & set(states.values()):
            continue
        whole = 0 if hours is None else int((hours[1] - hours[0]).total_seconds()) // 3600
        room = slots - whole * (3600 // policy.slot_s)  # the edges: any slot may be short
        for h in range(whole):
            at = int(hours[0].timestamp()) + h * 3600
            room += min(3600 // policy.slot_s, sum(
                (3600 - usage.busy_by_hour.get((rid, g), {}).get(at, 0)) // policy.slot_busy_s
                for g in kept))
        if room >= rank:
            found.add(rid)
    return found


def _right_size(*, rid, held, idle, inputs, window, policy, busy):
    """(target count, GPUs to give back, concurrency evidence) when the nearest-rank
    percentile of busy GPUs per slot is below the GPUs kept after reclaiming the idle
    ones; the least busy of the others go. The target is at least 1."""
    others = [g for g in held if g not in idle]
    if len(others) < 2 or rid not in inputs.full_read:
        return None
    slots = {g: inputs.slots[g] for g in held if g in inputs.slots}
    counts = concurrency_per_slot(slots=slots, start=window.start, end=window.end,
                                  slot_s=policy.slot_s, min_busy_s=policy.slot_busy_s)
    p = nearest_rank_percentile(counts, policy.percentile)
    if p is None:
        return None
    target = max(p, 1)
    if target >= len(others):
        return None
    by_busy = sorted(others, key=lambda g: (busy.get(g, 0), g))
    histogram = {str(n): counts.count(n) for n in sorted(set(counts))}
    concurrency = {"percentile": policy.percentile, "value": p, "slots": len(counts),
                   "held": len(held), "histogram": histogram}
    return target, sorted(by_busy[: len(others) - target]), concurrency
