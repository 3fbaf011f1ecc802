"""Capacity, quota and guarantee arithmetic (accounting.md: Quota, Reservation).

Everything here reads; it never writes. Intervals are half-open `[a, b)` in UTC.
A GPU is *free* at an instant when it is a physical GPU of the class, in
service, not `failed`, not blocked for maintenance, not held out by an app above
(`GPUS_HELD_OUT`: a drained GPU) and not assigned.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q

from gpuquota.core.contributions import gpus_held_out
from gpuquota.inventory.models import (
    Gpu,
    GpuClass,
    GpuClassInterval,
    GpuHealthInterval,
    MaintenanceBlock,
)
from gpuquota.reservations.models import Assignment, Quota, Reservation

COUNTED_STATUSES = (Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE)
NEXT_FREE_HORIZON = timedelta(days=90)

Interval = tuple[datetime, datetime]


def _overlapping(start_field: str, end_field: str, start: datetime, end: datetime) -> Q:
    """Rows whose [start_field, end_field) overlaps [start, end); a NULL end is open."""
    return Q(**{f"{start_field}__lt": end}) & (
        Q(**{f"{end_field}__isnull": True}) | Q(**{f"{end_field}__gt": start})
    )


def _subtract(free: list[Interval], busy: Interval) -> list[Interval]:
    lo, hi = busy
    out = []
    for a, b in free:
        if hi <= a or lo >= b:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, lo))
        if hi < b:
            out.append((hi, b))
    return out


@dataclass(frozen=True)
class FreeMap:
    """Per GPU of a class, its free intervals inside [start, end)."""

    start: datetime
    end: datetime
    gpus: dict[int, Gpu]
    free: dict[int, list[Interval]]

    def gpus_free_over(self, start: datetime, end: datetime) -> list[Gpu]:
        """GPUs free over the whole of [start, end)."""
        return [
            self.gpus[gpu_id]
            for gpu_id, intervals in self.free.items()
            if any(a <= start and end <= b for a, b in intervals)
        ]

    def free_count_at(self, at: datetime) -> int:
        return sum(1 for intervals in self.free.values() if any(a <= at < b for a, b in intervals))

    def breakpoints(self) -> set[datetime]:
        points = {self.start}
        for intervals in self.free.values():
            for a, b in intervals:
                points.update((a, b))
        return {p for p in points if self.start <= p < self.end}


def _class_intervals(*, gpu_class: GpuClass, start: datetime, end: datetime
                     ) -> dict[int, list[Interval]]:
    """Per GPU, the parts of [start, end) in which it is of `gpu_class`; a GPU without
    class history is of its current class throughout."""
    spans: dict[int, list[Interval]] = defaultdict(list)
    for gpu_id, lo, hi in GpuClassInterval.objects.filter(
        _overlapping("valid_from", "valid_until", start, end), gpu_class=gpu_class
    ).values_list("gpu_id", "valid_from", "valid_until"):
        spans[gpu_id].append((max(lo, start), min(hi or end, end)))
    for gpu_id in Gpu.objects.filter(gpu_class=gpu_class, class_history__isnull=True
                                     ).values_list("id", flat=True):
        spans[gpu_id].append((start, end))
    return spans


def free_map(
    *, gpu_class: GpuClass, start: datetime, end: datetime,
    exclude_reservation_id: int | None = None,
) -> FreeMap:
    """Free intervals of every physical GPU of the class within [start, end): only
    while it is of that class (class history) and in service."""
    in_class = _class_intervals(gpu_class=gpu_class, start=start, end=end)
    gpus = {
        gpu.id: gpu
        for gpu in Gpu.objects.filter(id__in=in_class, parent__isnull=True)
        .filter(_overlapping("commissioned_at", "retired_at", start, end))
        .select_related("node")
    }
    free: dict[int, list[Interval]] = {}
    for gpu in gpus.values():
        lo = max(start, gpu.commissioned_at)
        hi = min(end, gpu.retired_at) if gpu.retired_at else end
        free[gpu.id] = [(max(lo, a), min(hi, b)) for a, b in sorted(in_class[gpu.id])
                        if max(lo, a) < min(hi, b)]
    gpus = {gpu_id: gpu for gpu_id, gpu in gpus.items() if free[gpu_id]}
    free = {gpu_id: free[gpu_id] for gpu_id in gpus}
    busy: list[tuple[int, datetime, datetime | None]] = []
    busy += GpuHealthInterval.objects.filter(
        _overlapping("valid_from", "valid_until", start, end),
        gpu_id__in=gpus, state=GpuHealthInterval.State.FAILED,
    ).values_list("gpu_id", "valid_from", "valid_until")
    busy += MaintenanceBlock.objects.filter(
        _overlapping("valid_from", "valid_until", start, end), gpu_id__in=gpus
    ).values_list("gpu_id", "valid_from", "valid_until")
    busy += gpus_held_out(gpu_ids=gpus, start=start, end=end)  # reliability: drained GPUs
    assignments = Assignment.objects.filter(
        assigned_from__lt=end, assigned_until__gt=start, gpu_id__in=gpus,
    ).exclude(assigned_until=F("assigned_from"))
    if exclude_reservation_id is not None:
        assignments = assignments.exclude(reservation_id=exclude_reservation_id)
    busy += assignments.values_list("gpu_id", "assigned_from", "assigned_until")
    for gpu_id, lo, hi in busy:
        free[gpu_id] = _subtract(free[gpu_id], (lo, hi or end))
    return FreeMap(start=start, end=end, gpus=gpus, free=free)


def _step_value_at(rows: list[tuple[datetime, datetime | None, int]], at: datetime) -> int:
    return sum(value for lo, hi, value in rows if lo <= at and (hi is None or at < hi))


def quota_rows(*, gpu_class: GpuClass, start: datetime, end: datetime, team_id: int | None = None):
    """(team_id, valid_from, valid_until, gpus) of quota rows overlapping [start, end)."""
    rows = Quota.objects.filter(
        _overlapping("valid_from", "valid_until", start, end), gpu_class=gpu_class
    )
    if team_id is not None:
        rows = rows.filter(team_id=team_id)
    return list(rows.values_list("team_id", "valid_from", "valid_until", "gpus"))


def counted_rows(
    *, gpu_class: GpuClass, start: datetime, end: datetime, team_id: int | None = None
):
    """(team_id, assigned_from, assigned_until, 1) of assignments that count against quota."""
    rows = Assignment.objects.filter(
        assigned_from__lt=end, assigned_until__gt=start,
        reservation__gpu_class=gpu_class, reservation__status__in=COUNTED_STATUSES,
    ).exclude(assigned_until=F("assigned_from"))
    if team_id is not None:
        rows = rows.filter(reservation__team_id=team_id)
    fields = ("reservation__team_id", "assigned_from", "assigned_until")
    return [(team, lo, hi, 1) for team, lo, hi in rows.values_list(*fields)]


def _points(start: datetime, end: datetime, *row_lists) -> list[datetime]:
    points = {start}
    for rows in row_lists:
        for _team, lo, hi, _value in rows:
            points.update(p for p in (lo, hi) if p is not None and start <= p < end)
    return sorted(points)


@dataclass(frozen=True)
class QuotaCheck:
    in_quota: bool
    quota_min: int
    worst_at: datetime | None
    counted_at_worst: int
    quota_at_worst: int


def quota_check(
    *, team_id: int, gpu_class: GpuClass, start: datetime, end: datetime, count: int
) -> QuotaCheck:
    """Whether `count` more GPUs keep the team within its quota at every instant."""
    quotas = quota_rows(gpu_class=gpu_class, start=start, end=end, team_id=team_id)
    counted = counted_rows(gpu_class=gpu_class, start=start, end=end, team_id=team_id)
    quota_min = None
    worst = None
    for at in _points(start, end, quotas, counted):
        quota = _step_value_at([r[1:] for r in quotas], at)
        used = _step_value_at([r[1:] for r in counted], at)
        quota_min = quota if quota_min is None else min(quota_min, quota)
        if used + count > quota and worst is None:
            worst = (at, used, quota)
    if worst is None:
        return QuotaCheck(True, quota_min or 0, None, 0, 0)
    return QuotaCheck(False, quota_min or 0, worst[0], worst[1], worst[2])


def guarantee_shortfall_at(
    *, team_id: int, gpu_class: GpuClass, start: datetime, end: datetime, count: int,
    fmap: FreeMap,
) -> tuple[datetime, int] | None:
    """The first instant where `count` GPUs for an over-quota request would eat into
    another team's unused guarantee, with what is usable there; None if never."""
    window = {"gpu_class": gpu_class, "start": start, "end": end}
    quotas = [r for r in quota_rows(**window) if r[0] != team_id]
    counted = [r for r in counted_rows(**window) if r[0] != team_id]
    points = sorted(set(_points(start, end, quotas, counted)) | fmap.breakpoints())
    teams = {r[0] for r in quotas}
    for at in points:
        unused = 0
        for team in teams:
            quota = _step_value_at([r[1:] for r in quotas if r[0] == team], at)
            used = _step_value_at([r[1:] for r in counted if r[0] == team], at)
            unused += max(0, quota - used)
        usable = fmap.free_count_at(at) - unused
        if usable < count:
            return at, max(0, usable)
    return None


def next_free_at(
    *, gpu_class: GpuClass, start: datetime, end: datetime, count: int,
    same_node: bool = False,
) -> datetime | None:
    """The earliest instant ≥ start from which `count` GPUs (on one node, for
    `same_node`) are free for the same duration, looking up to 90 days ahead; None
    if not within that horizon."""
    duration = end - start
    fmap = free_map(gpu_class=gpu_class, start=start, end=start + NEXT_FREE_HORIZON + duration)
    candidates = sorted({a for intervals in fmap.free.values() for a, _ in intervals} | {start})
    for at in candidates:
        if at < start or at > start + NEXT_FREE_HORIZON:
            continue
        free = fmap.gpus_free_over(at, at + duration)
        if same_node:
            free = max(gpus_by_node(free).values(), key=len, default=[])
        if len(free) >= count:
            return at
    return None


def gpus_by_node(gpus: list[Gpu]) -> dict[int, list[Gpu]]:
    by_node: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        by_node[gpu.node_id].append(gpu)
    for node_gpus in by_node.values():
        node_gpus.sort(key=lambda g: (g.index if g.index is not None else 1_000_000, g.id))
    return by_node


def placement_pick(*, gpus: list[Gpu], count: int, same_node: bool) -> list[Gpu] | None:
    """`count` of `gpus` on the fewest nodes: the tightest single node that fits,
    else the fullest nodes first; with `same_node`, one node or None."""
    by_node = gpus_by_node(gpus)
    fitting = [g for g in by_node.values() if len(g) >= count]
    if fitting:
        best = min(fitting, key=lambda g: (len(g), g[0].node.hostname))
        return best[:count]
    if same_node or len(gpus) < count:
        return None
    picked: list[Gpu] = []
    for node_gpus in sorted(by_node.values(), key=lambda g: (-len(g), g[0].node.hostname)):
        picked.extend(node_gpus[: count - len(picked)])
        if len(picked) == count:
            break
    return picked
