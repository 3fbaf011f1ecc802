"""What the policy finds on one reservation over one look-back window (a read: no
writes). accounting.md, "Reclaim recommendations": idle GPUs (reclaim), the 95th
percentile of concurrency below the count (right-size), too little coverage to
judge (coverage warning). A bounded number of queries per reservation."""

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from django.db.models import Q

from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Reservation
from gpuquota.usage.selectors import GpuUsage, reservation_gpu_usage
from gpuquota.usage.slots import (
    GpuSlots,
    concurrency_per_slot,
    gpu_busy_slots,
    nearest_rank_percentile,
)
from reclaim.conf import Policy
from reclaim.models import Recommendation
from reclaim.savings import Savings, remaining_savings

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

    def of_kind(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)


def _ratio(value: Fraction | None) -> str | None:
    return None if value is None else f"{float(value):.4f}"


def gpu_evidence(*, usage: GpuUsage | None, slots: GpuSlots, window_s: int) -> dict:
    """The evidence shown for one GPU: what the agents saw over the window."""
    usage = usage or GpuUsage(slots.gpu_id)
    judged_s = max(window_s - slots.failed_s, 0)
    return {
        "covered_s": usage.covered_s, "busy_s": usage.busy_s, "judged_s": judged_s,
        "failed_s": slots.failed_s,
        "coverage": _ratio(Fraction(usage.covered_s, judged_s) if judged_s else None),
        "busy_fraction": _ratio(usage.busy_fraction),
        "mean_util_gpu": _ratio(usage.mean_util_gpu),
        "memory_used_bytes_max": usage.memory_used_bytes_max,
        "process_count": usage.process_count,
        "users_seen": sorted(usage.users_seen),
        "last_busy_at": slots.last_busy_at.isoformat() if slots.last_busy_at else None,
    }


def _classify(ev: dict, policy: Policy) -> str:
    """`idle`, `low_coverage`, `in_use` or `failed` (nothing to judge)."""
    if not ev["judged_s"]:
        return "failed"
    if Fraction(ev["covered_s"], ev["judged_s"]) < Fraction(policy.min_coverage):
        return "low_coverage"
    if Fraction(ev["busy_s"], ev["covered_s"]) < Fraction(policy.idle_busy_fraction):
        return "idle"
    return "in_use"


def reservation_findings(*, reservation: Reservation, now: datetime, policy: Policy
                         ) -> ReservationFindings:
    """The policy's findings on a reservation over [now − look-back, now), per GPU it
    holds at `now`, failed time left out."""
    window = Period(now - policy.lookback, now)
    held = sorted(reservation.assignments.filter(assigned_from__lte=now, assigned_until__gt=now)
                  .values_list("gpu_id", flat=True))
    result = ReservationFindings(reservation, window, held)
    if not held:
        return result
    usage = reservation_gpu_usage(reservation=reservation, period=window)
    slots = gpu_busy_slots(gpu_ids=held, start=window.start, end=window.end,
                           assignment_filter=Q(reservation=reservation), slot_s=policy.slot_s)
    evidence = {g: gpu_evidence(usage=usage.get(g), slots=slots[g], window_s=window.seconds)
                for g in held}
    state = {g: _classify(evidence[g], policy) for g in held}
    per_gpu = {str(g): {**evidence[g], "state": state[g]} for g in held}
    low = [g for g in held if state[g] == "low_coverage"]
    idle = [g for g in held if state[g] == "idle"]
    if low:
        result.findings.append(Finding(K.COVERAGE_WARNING, low, {"gpus": per_gpu}))
    if idle:
        result.findings.append(Finding(
            K.RECLAIM, idle, {"gpus": per_gpu},
            savings=remaining_savings(reservation=reservation, gpu_ids=idle, at=now)))
    if not low:
        right = _right_size(held=held, idle=idle, slots=slots, evidence=evidence,
                            window=window, policy=policy)
        if right is not None:
            target, gpus, concurrency = right
            result.findings.append(Finding(
                K.RIGHT_SIZE, gpus, {"gpus": per_gpu, "concurrency": concurrency},
                target_count=target,
                savings=remaining_savings(reservation=reservation, gpu_ids=gpus, at=now)))
    return result


def _right_size(*, held, idle, slots, evidence, window, policy):
    """(target count, GPUs to give back, concurrency evidence) when the nearest-rank
    percentile of busy GPUs per slot is below the GPUs kept after reclaiming the idle
    ones; the least busy of the others go. The target is at least 1."""
    counts = concurrency_per_slot(slots=slots, start=window.start, end=window.end,
                                  slot_s=policy.slot_s, min_busy_s=policy.slot_busy_s)
    p = nearest_rank_percentile(counts, policy.percentile)
    if p is None:
        return None
    target = max(p, 1)
    others = [g for g in held if g not in idle]
    if target >= len(others):
        return None
    by_busy = sorted(others, key=lambda g: (evidence[g]["busy_s"], g))
    histogram = {str(n): counts.count(n) for n in sorted(set(counts))}
    concurrency = {"percentile": policy.percentile, "value": p, "slots": len(counts),
                   "held": len(held), "histogram": histogram}
    return target, sorted(by_busy[: len(others) - target]), concurrency
