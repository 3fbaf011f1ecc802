"""Everything one evaluation reads, for all reservations under evaluation at once, in
a fixed number of queries whatever their number: the assignments, the usage over
each look-back window (hourly rollups, partial edges from samples), the counted
spans and failures, rate cards, and busy seconds per 60 s slot. The per-slot read
is what costs at fleet scale (a GPU-day is 1,440 one-minute samples), so the
samples are read in full only for the reservations whose right-size it must settle;
for the others only the hour that holds each GPU's last busy second."""

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.selectors import GpuUsage, ReservationsGpuUsage, reservations_gpu_usage
from gpuquota.usage.slots import CountedSpans, GpuSlots, busy_slots_read, counted_spans
from reclaim.conf import Policy
from reclaim.savings import Savings, rate_cards, remaining_savings

HOUR_S = 3600


def _s(value: datetime) -> int:
    return int(value.timestamp())


@dataclass
class EvaluationInputs:
    now: datetime
    reservations: dict[int, Reservation]
    held: dict[int, list[int]]  # reservation id → GPUs it holds at `now`
    remaining: dict[int, list[dict]]  # reservation id → assignment rows running after `now`
    usage: dict[timedelta, ReservationsGpuUsage] = field(default_factory=dict)
    spans: CountedSpans | None = None
    slots: dict[int, GpuSlots] = field(default_factory=dict)
    full_read: set[int] = field(default_factory=set)  # reservations read slot by slot
    cards: dict[int, list] = field(default_factory=dict)

    def ran_at_least(self, rid: int, lookback: timedelta) -> bool:
        """The reservation's charged window began at least `lookback` before now."""
        r = self.reservations[rid]
        return max(r.start, r.approved_at or r.start) <= self.now - lookback

    def evidence(self, rid: int, gpu_id: int, lookback: timedelta) -> dict:
        slots = self.slots.get(gpu_id)
        return gpu_evidence(
            usage=self.usage[lookback].by_gpu.get((rid, gpu_id)), gpu_id=gpu_id,
            window_s=int(lookback.total_seconds()),
            failed_s=self.spans.failed_s(gpu_id, since=self.now - lookback),
            last_busy_at=slots.last_busy_at if slots else None)

    def edges(self, rid: int, lookback: timedelta) -> dict:
        """{"edges": [...]}: each partial edge hour of the look-back window as the review
        page's chart shows it (start, end, and per GPU with samples there its covered
        seconds and utilization × seconds), so the page need not read the samples again;
        {} when the reservation's window was not read."""
        usage = self.usage.get(lookback)
        if usage is None or rid not in self.held or not self.ran_at_least(rid, lookback):
            return {}
        found = usage.by_edge.get(rid, {})
        return {"edges": [
            {"start": start.isoformat(), "end": end.isoformat(), "gpus": {
                str(gpu_id): [u.covered_s, str(u.util_weighted)]
                for gpu_id, u in sorted(found.get((start, end), {}).items())}}
            for start, end in usage.edges]}

    def savings(self, reservation: Reservation, gpu_ids: list[int]) -> Savings:
        rows = [a for a in self.remaining.get(reservation.id, []) if a["gpu_id"] in gpu_ids]
        return remaining_savings(reservation=reservation, assignments=rows, at=self.now,
                                 cards=self.cards.get(reservation.gpu_class_id, []))


def _ratio(value: Fraction | None) -> str | None:
    return None if value is None else f"{float(value):.4f}"


def gpu_evidence(*, usage: GpuUsage | None, gpu_id: int, window_s: int, failed_s: int,
                 last_busy_at: datetime | None) -> dict:
    """The evidence shown for one GPU: what the agents saw over the window."""
    usage = usage or GpuUsage(gpu_id)
    judged_s = max(window_s - failed_s, 0)
    return {
        "window_s": window_s,
        "covered_s": usage.covered_s, "busy_s": usage.busy_s, "judged_s": judged_s,
        "failed_s": failed_s,
        "coverage": _ratio(Fraction(usage.covered_s, judged_s) if judged_s else None),
        "busy_fraction": _ratio(usage.busy_fraction),
        "mean_util_gpu": _ratio(usage.mean_util_gpu),
        "memory_used_bytes_max": usage.memory_used_bytes_max,
        "process_count": usage.process_count,
        "users_seen": sorted(usage.users_seen),
        "last_busy_at": last_busy_at.isoformat() if last_busy_at else None,
    }


def evaluation_inputs(*, reservations: list[Reservation], now: datetime, policy: Policy,
                      right_size_candidates: Callable[[EvaluationInputs, Policy], set[int]]
                      ) -> EvaluationInputs:
    """The inputs of an evaluation at `now`; `right_size_candidates` names the
    reservations whose samples must be read slot by slot over the look-back."""
    by_id = {r.id: r for r in reservations}
    held: dict[int, list[int]] = defaultdict(list)
    remaining: dict[int, list[dict]] = defaultdict(list)
    for row in Assignment.objects.filter(reservation_id__in=list(by_id), assigned_until__gt=now
                                         ).values("reservation_id", "gpu_id", "assigned_from",
                                                  "assigned_until"):
        remaining[row["reservation_id"]].append(row)
        if row["assigned_from"] <= now:
            held[row["reservation_id"]].append(row["gpu_id"])
    inputs = EvaluationInputs(now=now, reservations=by_id,
                              held={r: sorted(g) for r, g in held.items()},
                              remaining=dict(remaining))
    for lookback in policy.lookbacks:
        inputs.usage[lookback] = reservations_gpu_usage(
            reservation_ids=[r for r in inputs.held if inputs.ran_at_least(r, lookback)],
            period=Period(now - lookback, now))
    owners = {g: r for r, gpu_ids in inputs.held.items() for g in gpu_ids}
    longest = policy.lookbacks[-1]
    inputs.spans = counted_spans(gpu_ids=sorted(owners), start=now - longest, end=now,
                                 owners=owners)
    inputs.full_read = right_size_candidates(inputs, policy)
    inputs.slots = busy_slots_read(spans=inputs.spans, read=_reads(inputs, policy),
                                   slot_s=policy.slot_s)
    inputs.cards = rate_cards(gpu_class_ids={r.gpu_class_id for r in reservations},
                              since=now)
    return inputs


def _reads(inputs: EvaluationInputs, policy: Policy) -> dict[int, list[tuple[int, int]]]:
    """Per held GPU, the epoch-second intervals whose samples are read: the whole
    look-back for right-size candidates; otherwise the whole hour of its last busy
    second the rollups show, the partial hour up to now (later than any whole hour)
    and, when no whole hour was busy, the partial hour that opens its longest window."""
    now = _s(inputs.now)
    tail = (_s(hour_floor(inputs.now)), now)
    reads: dict[int, list[tuple[int, int]]] = {}
    for rid, gpu_ids in inputs.held.items():
        windows = [lb for lb in policy.lookbacks if inputs.ran_at_least(rid, lb)]
        longest = windows[-1] if windows else policy.lookbacks[0]
        start = now - int(longest.total_seconds())
        usage = inputs.usage.get(longest)
        for gpu_id in gpu_ids:
            if rid in inputs.full_read:
                reads[gpu_id] = [(now - int(policy.lookback.total_seconds()), now)]
                continue
            if usage is None or usage.whole_hours is None:
                reads[gpu_id] = [(start, now)]
                continue
            last = max((h for h, b in usage.busy_by_hour.get((rid, gpu_id), {}).items() if b),
                       default=None)
            first = _s(usage.whole_hours[0])
            head = [(start, first)] if last is None else [(last, last + HOUR_S)]
            reads[gpu_id] = [iv for iv in [*head, tail] if iv[0] < iv[1]]
    return reads
