"""The rollup rule, as pure computation over loaded inputs (accounting.md, Usage samples).

`usage_inputs_load` (`rollup_inputs`) reads everything a set of physical GPUs needs over
a window in a fixed number of queries; `usage_buckets` turns it into per-bucket sums for one
GPU and any whole-second window (an hour for the stored rollups, a partial hour
at a period's edge for the selectors). Times are handled as epoch seconds and
utilizations as integer hundredths (the samples' exact two decimals), so the bulk rows
load as plain integers and the arithmetic makes no per-window objects; a dense hour's
rollup costs about as much as reading its rows.
"""

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from itertools import pairwise
from operator import attrgetter

from gpuquota.usage.rollup_inputs import (  # noqa: F401 (loaded through the rule's module)
    Span,
    UsageInputs,
    coverage_pieces,
    epoch_s,
    usage_inputs_load,
)

RESERVED, UNRESERVED, BORROWED = "reserved", "unreserved", "borrowed"


@dataclass
class Bucket:
    covered_s: int = 0
    busy_s: int = 0
    util_weighted: Decimal = Decimal(0)
    energy_j: float = 0.0
    memory_used_bytes_max: int | None = None
    processes: set = field(default_factory=set)
    users: set = field(default_factory=set)


@dataclass(frozen=True)
class BucketKey:
    kind: str
    gpu_class_id: int
    assignment_id: int | None
    reservation_id: int | None
    team_id: int | None
    split_ways: int
    failed: bool
    rate_card_id: int | None = None


def _at(spans: list[Span], at: int):
    for span in spans:
        if span.covers(at):
            return span
    return None


def _cuts(start: int, end: int, *groups) -> list[int]:
    points = {start, end}
    for items in groups:
        points.update(item.start for item in items if start < item.start < end)
        points.update(item.end for item in items
                      if item.end is not None and start < item.end < end)
    return sorted(points)


class _Sums:
    """A bucket being summed: util as hundredths × seconds (exact integers)."""

    __slots__ = ("covered_s", "busy_s", "util_c_s", "energy_j", "memory_max", "processes",
                 "users")

    def __init__(self):
        self.covered_s = self.busy_s = self.util_c_s = 0
        self.energy_j = 0.0
        self.memory_max = None
        self.processes, self.users = set(), set()

    def bucket(self) -> Bucket:
        return Bucket(covered_s=self.covered_s, busy_s=self.busy_s,
                      util_weighted=Decimal(self.util_c_s).scaleb(-2), energy_j=self.energy_j,
                      memory_used_bytes_max=self.memory_max, processes=self.processes,
                      users=self.users)


class _Live:
    """The items of a list sorted by start that cover the instant a sweep has reached."""

    def __init__(self, items: list):
        self._items, self._next, self.now = items, 0, []

    def at(self, at: int) -> list:
        items, i = self._items, self._next
        if i < len(items) and items[i].start <= at:
            while i < len(items) and items[i].start <= at:
                self.now.append(items[i])
                i += 1
            self._next = i
        if self.now:
            self.now = [item for item in self.now if item.end > at]
        return self.now


class _Context:
    """What the intervals of one GPU say at an instant: class, failed, rate card,
    assignment, cluster, lent. Segments are cut at the bounds of all but the node intervals
    (the cluster is the one at a segment's start)."""

    def __init__(self, inputs: UsageInputs, gpu_id: int):
        self.inputs, self.gpu_id = inputs, gpu_id
        self.assignments = inputs.assignments.get(gpu_id, [])
        self.classes = inputs.classes.get(gpu_id, [])
        self.failures = inputs.failures.get(gpu_id, [])
        self.clusters = inputs.clusters.get(gpu_id, [])
        self.loans = inputs.loans.get(gpu_id, [])
        class_ids = {span.value for span in self.classes} | {inputs.current_class[gpu_id]}
        cards = [span for class_id in class_ids for span in inputs.rate_cards.get(class_id, ())]
        self.cutting = (self.assignments, self.classes, self.failures, cards, self.loans)
        self._changes = sorted({point for spans in (*self.cutting, self.clusters)
                                for span in spans for point in (span.start, span.end)
                                if point is not None})

    def at(self, a: int) -> tuple:
        klass = _at(self.classes, a)
        class_id = klass.value if klass else self.inputs.current_class[self.gpu_id]
        card = _at(self.inputs.rate_cards.get(class_id, []), a)
        node = _at(self.clusters, a)
        assignment = _at(self.assignments, a)
        loan = _at(self.loans, a)
        return (class_id, _at(self.failures, a) is not None, card.value if card else None,
                assignment, node.value if node else self.inputs.current_cluster[self.gpu_id],
                # a loan lends its own assignment only (the database holds it inside)
                assignment is not None and loan is not None
                and loan.value == assignment.value[0])

    def next_change(self, a: int) -> int | float:
        """The first bound after `a` (infinity: none)."""
        i = bisect_right(self._changes, a)
        return self._changes[i] if i < len(self._changes) else math.inf


def _overlapping(inputs: UsageInputs, table: str, device: int, lo: int, hi: int) -> list:
    """A device's pieces or process windows that overlap [lo, hi), by start: found by
    bisection (none starts before lo less the longest), so an hour of a loaded day costs
    an hour's items, not the day's."""
    timeline = inputs.timelines.get((table, device))
    if timeline is None:
        items = sorted(getattr(inputs, table).get(device, ()), key=attrgetter("start"))
        timeline = inputs.timelines[table, device] = (
            items, [item.start for item in items],
            max((item.end - item.start for item in items), default=0))
    items, starts, longest = timeline
    return [item for item in items[bisect_left(starts, lo - longest):bisect_left(starts, hi)]
            if item.end > lo]


def _by_sample(inputs: UsageInputs, device: int) -> dict[tuple, list]:
    """A device's process records by the sample they were stored with (accounting.md,
    Owners follow the covering sample): built once per loaded window."""
    found = inputs.timelines.get(("by_sample", device))
    if found is None:
        found = inputs.timelines["by_sample", device] = {}
        for record in inputs.procs.get(device, ()):
            found.setdefault(record.sample_key, []).append(record)
    return found


#: What a bucket takes of a segment: all of it, its covered seconds only (a lent GPU's
#: reserving team: the loan's busy seconds are not its own), or its busy seconds only (the
#: borrowers': the covered time is counted once, for the reservation).
ALL, COVERED, BUSY = 0, 1, 2


def _lent_keys(class_id, assignment, failed, card_id, busy, owner_of) -> list[tuple]:
    """A segment of a lent GPU: covered for the reserving team, busy for the other owner
    teams of the covering sample (split; unattributed when there is none)."""
    assignment_id, reservation_id, team = assignment
    keyed = [((RESERVED, class_id, assignment_id, reservation_id, team, 1, failed, card_id),
              [r for r, owner in owner_of if owner == team], COVERED)]
    if busy:
        owners = {owner for _, owner in owner_of} - {None, team} or {None}
        keyed += [((BORROWED, class_id, assignment_id, reservation_id, owner, len(owners),
                    failed, card_id),
                   [r for r, o in owner_of if o == owner or (owner is None and o == team)], BUSY)
                  for owner in owners]
    return keyed


def usage_buckets(*, inputs: UsageInputs, gpu_id: int, start: datetime | None = None,
                  end: datetime | None = None) -> dict[BucketKey, Bucket]:
    """Per-bucket sums for one physical GPU over [start, end) (default: the loaded
    window). Owners come from the process records of the sample covering a second. MIG
    devices count for the parent: covered if any covers, busy if any is busy, util = max;
    owners are those of the busy devices' samples (of the covering devices' when not
    busy); several owner teams split the window. During a loan, busy seconds are the
    borrowers' (`BORROWED` buckets), never the reserving team's."""
    lo = inputs.start if start is None else max(inputs.start, epoch_s(start))
    hi = inputs.end if end is None else min(inputs.end, epoch_s(end))
    devices = inputs.devices.get(gpu_id, [gpu_id])
    # pieces in device order: several devices' energies add up in that order, as floats
    pieces = [p for d in devices for p in _overlapping(inputs, "pieces", d, lo, hi)]
    if not pieces:
        return {}
    rank = {device: i for i, device in enumerate(devices)}
    by_sample = {}
    for device in devices:
        by_sample.update(_by_sample(inputs, device))
    context = _Context(inputs, gpu_id)
    next_change = lo
    live_pieces = _Live(sorted(pieces, key=lambda p: (p.start, rank[p.device_id])))
    team_id = inputs.resolver.team_id
    sums: dict[tuple, _Sums] = {}
    for a, b in pairwise(_cuts(lo, hi, pieces, *context.cutting)):
        active = live_pieces.at(a)
        if not active:
            continue
        seconds = b - a
        if len(active) == 1:  # one device covers it: the common case, the same sums
            piece = active[0]
            util_c, busy = piece.util_c, piece.busy
            seg_procs = by_sample.get(piece.sample_key, ())
        else:
            active = sorted(active, key=lambda p: rank[p.device_id])
            util_c = max(p.util_c for p in active)
            busy = any(p.busy for p in active)
            seg_procs = [r for p in active if p.busy or not busy
                         for r in by_sample.get(p.sample_key, ())]
        if a >= next_change:  # the spans' values only change at their bounds
            class_id, failed, card_id, assignment, cluster_id, lent = context.at(a)
            next_change = context.next_change(a)
        if assignment is not None and not lent:
            assignment_id, reservation_id, team = assignment.value
            # the team's GPU: whoever ran there is shown to it
            keyed = [((RESERVED, class_id, assignment_id, reservation_id, team, 1, failed,
                       card_id), seg_procs, ALL)]
        else:
            owner_of = [
                (r, team_id(cluster_id=cluster_id, job_source=r.job_source,
                            job_account=r.job_account, user=r.user, uid=r.uid, at_s=r.start))
                for r in seg_procs
            ]
            if lent:
                keyed = _lent_keys(class_id, assignment.value, failed, card_id, busy, owner_of)
            else:
                # split among the distinct owner teams; unattributed only when there is none
                owners = {owner for _, owner in owner_of} - {None} or {None}
                keyed = [
                    ((UNRESERVED, class_id, None, None, team, len(owners), failed, card_id),
                     [r for r, owner in owner_of if owner == team], ALL)
                    for team in owners
                ]
        energy = sum(p.energy_per_s * seconds for p in active if p.energy_per_s is not None)
        memories = [p.memory_max for p in active if p.memory_max is not None]
        for key, key_procs, takes in keyed:
            bucket = sums.get(key)
            if bucket is None:
                bucket = sums[key] = _Sums()
            if takes != BUSY:
                bucket.covered_s += seconds
                bucket.util_c_s += util_c * seconds
                bucket.energy_j += energy
                if memories:
                    bucket.memory_max = max(bucket.memory_max or 0, *memories)
            if busy and takes != COVERED:
                bucket.busy_s += seconds
            if key_procs:
                bucket.processes.update((r.device_id, r.pid, r.pid_start) for r in key_procs)
                bucket.users.update(r.user for r in key_procs if r.user)
    return {BucketKey(*key): bucket.bucket() for key, bucket in sums.items()}
