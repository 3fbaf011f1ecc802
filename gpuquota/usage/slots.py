"""Busy time per GPU in fixed UTC slots, straight from the samples (accounting.md,
"Reclaim recommendations": concurrency per 60 s slot, a GPU counting in a slot when
busy at least 30 s of it). Four queries whatever the number of GPUs or slots; the
samples can be read for chosen intervals only (`busy_slots_read`).

Only the seconds inside the given assignments' charged windows count, and never
the seconds while the GPU was failed. MIG devices count for their parent: a
second is busy when any of its devices is busy.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from operator import or_

from django.db.models import Q

from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, busy_util_percent
from gpuquota.usage.rollup import coverage_pieces

Interval = tuple[int, int]


def _s(value: datetime) -> int:
    return int(value.timestamp())


@dataclass
class GpuSlots:
    """One physical GPU's busy seconds per slot (slot k = [k·slot_s, (k+1)·slot_s) in
    epoch seconds) inside the counted intervals, and when it was last busy."""

    gpu_id: int
    slot_s: int
    busy_by_slot: dict[int, int] = field(default_factory=dict)
    counted_s: int = 0
    failed_s: int = 0
    last_busy_at: datetime | None = None

    @property
    def busy_s(self) -> int:
        return sum(self.busy_by_slot.values())

    def busy_slots(self, *, min_busy_s: int) -> set[int]:
        return {k for k, s in self.busy_by_slot.items() if s >= min_busy_s}


def _merge(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        elif a < b:
            merged.append((a, b))
    return merged


def _subtract(intervals: list[Interval], holes: list[Interval]) -> list[Interval]:
    result = []
    for a, b in intervals:
        pieces = [(a, b)]
        for h0, h1 in holes:
            pieces = [p for x, y in pieces for p in ((x, min(y, h0)), (max(x, h1), y))
                      if p[0] < p[1]]
        result.extend(pieces)
    return result


def _intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    out = []
    for a, b in xs:
        for c, d in ys:
            lo, hi = max(a, c), min(b, d)
            if lo < hi:
                out.append((lo, hi))
    return _merge(out)


def _counted_spans(*, gpu_ids: list[int], start: datetime, end: datetime,
                   assignment_filter: Q, owners: dict[int, int] | None = None
                   ) -> tuple[dict[int, list[Interval]], dict[int, list[Interval]]]:
    """Per GPU: the charged, non-failed parts of its matching assignments in the window
    (only those of reservation `owners[gpu]` when given), and its failed intervals in
    the window."""
    spans: dict[int, list[Interval]] = defaultdict(list)
    rows = Assignment.objects.filter(
        assignment_filter, gpu_id__in=gpu_ids, assigned_from__lt=end, assigned_until__gt=start
    ).values("gpu_id", "reservation_id", "assigned_from", "assigned_until",
             "reservation__start", "reservation__approved_at")
    lo, hi = _s(start), _s(end)
    for row in rows:
        if owners is not None and owners.get(row["gpu_id"]) != row["reservation_id"]:
            continue
        charged = max(row["assigned_from"], row["reservation__start"],
                      row["reservation__approved_at"] or row["reservation__start"])
        a, b = max(lo, _s(charged)), min(hi, _s(row["assigned_until"]))
        if a < b:
            spans[row["gpu_id"]].append((a, b))
    failures: dict[int, list[Interval]] = defaultdict(list)
    for row in GpuHealthInterval.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=start), gpu_id__in=gpu_ids,
        state=GpuHealthInterval.State.FAILED, valid_from__lt=end,
    ).values("gpu_id", "valid_from", "valid_until"):
        until = hi if row["valid_until"] is None else _s(row["valid_until"])
        failures[row["gpu_id"]].append((max(lo, _s(row["valid_from"])), min(hi, until)))
    failures = {gpu: _merge(f) for gpu, f in failures.items()}
    counted = {gpu: _subtract(_merge(s), failures.get(gpu, [])) for gpu, s in spans.items()}
    return counted, failures


@dataclass
class CountedSpans:
    """What `busy_slots_read` counts: per GPU the seconds of its window it is judged on
    (charged, not failed) and its failed intervals in the window."""

    start: datetime
    end: datetime
    counted: dict[int, list[Interval]]
    failures: dict[int, list[Interval]]

    def failed_s(self, gpu_id: int, since: datetime | None = None) -> int:
        """The GPU's failed seconds in the window (from `since` when given)."""
        lo = _s(since or self.start)
        return sum(max(0, b - max(a, lo)) for a, b in self.failures.get(gpu_id, []))


def counted_spans(*, gpu_ids: list[int], start: datetime, end: datetime,
                  assignment_filter: Q | None = None, owners: dict[int, int] | None = None
                  ) -> CountedSpans:
    """The counted spans of these GPUs over [start, end): inside their assignments
    matching `assignment_filter` (or of the reservation `owners` names per GPU),
    outside failed intervals. Two queries."""
    counted, failed = _counted_spans(gpu_ids=gpu_ids, start=start, end=end,
                                     assignment_filter=assignment_filter or Q(), owners=owners)
    return CountedSpans(start, end, counted, failed)


def _samples_query(devices: dict[int, int], read: dict[int, list[Interval]] | None,
                   start: datetime, end: datetime):
    lead = timedelta(seconds=MAX_WINDOW_S)
    if read is None:
        where = Q(gpu_id__in=list(devices), window_start__gte=start - lead, window_start__lt=end)
    else:  # one term per distinct range: a few whatever the number of GPUs
        by_range: dict[Interval, list[int]] = defaultdict(list)
        for device, gpu_id in devices.items():
            for interval in read.get(gpu_id, []):
                by_range[interval].append(device)
        where = reduce(or_, (
            Q(gpu_id__in=ids, window_start__gte=datetime.fromtimestamp(a, UTC) - lead,
              window_start__lt=datetime.fromtimestamp(b, UTC))
            for (a, b), ids in by_range.items()))
    return Sample.objects.filter(where).order_by("gpu_id", "window_start").values(
        "gpu_id", "window_start", "window_end", "readings", "util_gpu_avg", "energy_j",
        "memory_used_bytes_max")


def busy_slots_read(*, spans: CountedSpans, read: dict[int, list[Interval]] | None = None,
                    slot_s: int = 60) -> dict[int, GpuSlots]:
    """Per GPU of `spans`: busy seconds per UTC slot inside its counted spans, reading
    the samples only inside `read[gpu]` (epoch-second intervals; None: the whole
    window; a GPU missing from `read` reads nothing). Two queries."""
    gpu_ids = sorted(set(spans.counted) | set(spans.failures) | set(read or {}))
    devices: dict[int, int] = {}
    for row in Gpu.objects.filter(Q(id__in=gpu_ids) | Q(parent_id__in=gpu_ids)).values(
            "id", "parent_id"):
        devices[row["id"]] = row["parent_id"] or row["id"]
    if read is not None:
        read = {g: _merge(r) for g, r in read.items() if r}
    by_device: dict[int, list[dict]] = defaultdict(list)
    if devices and (read is None or any(read.get(g) for g in devices.values())):
        for row in _samples_query(devices, read, spans.start, spans.end):
            by_device[row["gpu_id"]].append(row)
    busy_from = busy_util_percent()
    busy: dict[int, list[Interval]] = defaultdict(list)
    for device, rows in by_device.items():
        busy[devices[device]].extend(
            (p.start, p.end) for p in coverage_pieces(rows, busy_from) if p.busy)
    result = {}
    for gpu_id in gpu_ids:
        counted = spans.counted.get(gpu_id, [])
        judged = counted if read is None else _intersect(counted, read.get(gpu_id, []))
        slots = GpuSlots(gpu_id=gpu_id, slot_s=slot_s,
                         counted_s=sum(b - a for a, b in counted),
                         failed_s=spans.failed_s(gpu_id))
        intervals = _intersect(_merge(busy.get(gpu_id, [])), judged)
        for a, b in intervals:
            for k in range(a // slot_s, (b - 1) // slot_s + 1):
                seconds = min(b, (k + 1) * slot_s) - max(a, k * slot_s)
                slots.busy_by_slot[k] = slots.busy_by_slot.get(k, 0) + seconds
        if intervals:
            slots.last_busy_at = datetime.fromtimestamp(intervals[-1][1], tz=UTC)
        result[gpu_id] = slots
    return result


def gpu_busy_slots(*, gpu_ids: list[int], start: datetime, end: datetime,
                   assignment_filter: Q | None = None, slot_s: int = 60) -> dict[int, GpuSlots]:
    """Per physical GPU: busy seconds per UTC slot over [start, end), counting only
    the seconds inside its assignments matching `assignment_filter` (e.g.
    `Q(reservation=r)`; None: any assignment) and outside failed intervals."""
    spans = counted_spans(gpu_ids=gpu_ids, start=start, end=end,
                          assignment_filter=assignment_filter)
    slots = busy_slots_read(spans=spans, slot_s=slot_s)
    return {g: slots.get(g) or GpuSlots(gpu_id=g, slot_s=slot_s) for g in gpu_ids}


def slot_range(*, start: datetime, end: datetime, slot_s: int = 60) -> range:
    """The slots lying wholly inside [start, end)."""
    return range(-(-_s(start) // slot_s), _s(end) // slot_s)


def concurrency_per_slot(*, slots: dict[int, GpuSlots], start: datetime, end: datetime,
                         slot_s: int = 60, min_busy_s: int = 30) -> list[int]:
    """For every slot wholly inside [start, end): how many GPUs were busy at least
    `min_busy_s` of it."""
    counts: dict[int, int] = defaultdict(int)
    for gpu in slots.values():
        for k in gpu.busy_slots(min_busy_s=min_busy_s):
            counts[k] += 1
    return [counts.get(k, 0) for k in slot_range(start=start, end=end, slot_s=slot_s)]


def nearest_rank_percentile(values: list[int], percentile: int) -> int | None:
    """The nearest-rank percentile: the smallest value with at least `percentile` % of
    the values at or below it (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = -(-percentile * len(ordered) // 100)
    return ordered[max(rank, 1) - 1]
