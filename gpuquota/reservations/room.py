"""How many GPUs a team can get for a window: the one "free" number the grid, the form
and the approvals queue show (accounting.md: Quota, Reservation).

- `within_quota`: GPUs assigned at once, without approval: the team's unused quota at
  the tightest instant of the window, and no more than are free over the whole window.
- `beyond_quota`: how many more an admin's approval could assign now: an over-quota
  request only uses capacity that no other team's unused guarantee needs, at every
  instant (`free − Σ other teams max(0, quota − counted)`), as `reservation_approve`
  decides; net of `within_quota`.
- `ceiling`: the most the class could ever offer the team in the window, whatever is
  reserved: GPUs in service, not failed, not in maintenance, less other teams' whole
  quotas. A request above it is refused at once rather than left pending.

Everything reads rows once per class and window; `ClassLedger` then answers any
sub-window (the 14 days of the grid) in Python without more queries.
"""

from dataclasses import dataclass
from datetime import datetime

from accounts.models import Team
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.capacity import (
    FreeMap,
    counted_rows,
    free_map,
    gpus_by_node,
    quota_rows,
)

Row = tuple[int, datetime, datetime | None, int]


def _value_at(rows: list[Row], at: datetime) -> int:
    return sum(value for _team, lo, hi, value in rows if lo <= at and (hi is None or at < hi))


@dataclass(frozen=True)
class Room:
    """What a team can get for a window, in GPUs."""

    free_gpus: int  # free over the whole window (on one node, for same-node requests)
    total_gpus: int  # in service in the window
    quota_left: int  # the team's unused quota at the tightest instant
    within_quota: int
    beyond_quota: int
    ceiling: int

    @property
    def can_get(self) -> int:
        return self.within_quota + self.beyond_quota

    def approvable(self, count: int) -> int:
        """The most an approval of `count` GPUs could assign now (the number the
        approvals queue shows): free capacity when `count` fits the quota, else what
        other teams' guarantees leave."""
        return self.free_gpus if count <= self.quota_left else self.can_get


class ClassLedger:
    """Free GPUs, quotas and counted assignments of one class over [start, end)."""

    def __init__(self, *, gpu_class: GpuClass, start: datetime, end: datetime,
                 fmap: FreeMap | None = None):
        window = {"gpu_class": gpu_class, "start": start, "end": end}
        self.fmap = fmap or free_map(**window)
        self.quotas: list[Row] = quota_rows(**window)
        self.counted: list[Row] = counted_rows(**window)

    def _points(self, start: datetime, end: datetime, *row_lists) -> list[datetime]:
        points = {start} | {p for p in self.fmap.breakpoints() if start < p < end}
        for rows in row_lists:
            for _team, lo, hi, _value in rows:
                points.update(p for p in (lo, hi) if p is not None and start < p < end)
        return sorted(points)

    def quota_at(self, *, team_id: int, at: datetime) -> int:
        """The team's quota of the class in force at `at`."""
        return _value_at([r for r in self.quotas if r[0] == team_id], at)

    def quota_left(self, *, team_id: int, start: datetime, end: datetime) -> int:
        """The team's quota minus what it holds, at the tightest instant (0 at least)."""
        quotas = [r for r in self.quotas if r[0] == team_id]
        counted = [r for r in self.counted if r[0] == team_id]
        left = min((_value_at(quotas, at) - _value_at(counted, at)
                    for at in self._points(start, end, quotas, counted)), default=0)
        return max(0, left)

    def guarantee_usable(self, *, team_id: int, start: datetime, end: datetime) -> int:
        """GPUs free beyond other teams' unused guarantees at the tightest instant."""
        quotas = [r for r in self.quotas if r[0] != team_id]
        counted = [r for r in self.counted if r[0] != team_id]
        teams = {r[0] for r in quotas}
        usable = None
        for at in self._points(start, end, quotas, counted):
            unused = sum(
                max(0, _value_at([r for r in quotas if r[0] == t], at)
                    - _value_at([r for r in counted if r[0] == t], at))
                for t in teams)
            here = self.fmap.free_count_at(at) - unused
            usable = here if usable is None else min(usable, here)
        return max(0, usable or 0)

    def free_over(self, *, start: datetime, end: datetime, same_node: bool = False) -> int:
        free = self.fmap.gpus_free_over(start, end)
        if same_node:
            return max(map(len, gpus_by_node(free).values()), default=0)
        return len(free)

    def others_guaranteed(self, *, team_id: int, start: datetime, end: datetime) -> int:
        """Other teams' quotas of the class at their peak in the window."""
        others = [r for r in self.quotas if r[0] != team_id]
        return max((_value_at(others, at) for at in self._points(start, end, others)),
                   default=0)

    def largest_node(self) -> int:
        """GPUs of the class in service in the window on its largest node."""
        return max(map(len, gpus_by_node(list(self.fmap.gpus.values())).values()), default=0)

    def ceiling(self, *, team_id: int, start: datetime, end: datetime,
                same_node: bool = False) -> int:
        """The most this team could ever get here, whatever else is reserved: the GPUs
        of the class in service in the window (on the largest node, for same-node) less
        other teams' quotas at their peak. A request above it can never be approved."""
        guaranteed = self.others_guaranteed(team_id=team_id, start=start, end=end)
        ceiling = max(0, len(self.fmap.gpus) - guaranteed)
        return min(ceiling, self.largest_node()) if same_node else ceiling

    def room(self, *, team_id: int, start: datetime, end: datetime,
             same_node: bool = False) -> Room:
        free = self.free_over(start=start, end=end, same_node=same_node)
        left = self.quota_left(team_id=team_id, start=start, end=end)
        within = min(left, free)
        usable = min(free, self.guarantee_usable(team_id=team_id, start=start, end=end))
        return Room(free_gpus=free, total_gpus=len(self.fmap.gpus), quota_left=left,
                    within_quota=within, beyond_quota=max(0, usable - within),
                    ceiling=self.ceiling(team_id=team_id, start=start, end=end,
                                         same_node=same_node))


def request_room(*, team: Team, gpu_class: GpuClass, start: datetime, end: datetime,
                 same_node: bool = False) -> Room:
    """What `team` can get of `gpu_class` over [start, end): within its quota at once,
    beyond it with an admin's approval, and the most it could ever get there."""
    ledger = ClassLedger(gpu_class=gpu_class, start=start, end=end)
    return ledger.room(team_id=team.id, start=start, end=end, same_node=same_node)


def gpus_text(count: int, class_name: str = "") -> str:
    """`1 H100-80GB GPU`, `3 H100-80GB GPUs`: counts in messages, in plain English."""
    return f"{count} {class_name + ' ' if class_name else ''}GPU{'' if count == 1 else 's'}"


def room_summary(*, room: Room, team_name: str) -> str:
    """What the team can get over the window, in one sentence (the form's hint)."""
    within, beyond = room.within_quota, room.beyond_quota
    if within and beyond:
        return (f"{team_name} can have {within} at once within its quota, and up to "
                f"{beyond} more with an admin's approval.")
    if within:
        return (f"{team_name} can have {within} at once within its quota; no more can be "
                "approved for this window now.")
    if beyond:
        return (f"{team_name} has no quota left for this window: up to {beyond} with an "
                "admin's approval.")
    return f"{team_name} can get none of these for this window now."


@dataclass(frozen=True)
class Verdict:
    """What submitting `count` GPUs would do, said before the lead submits."""

    kind: str  # in_quota | over_quota | over_quota_blocked | no_capacity | impossible
    message: str


def room_verdict(*, room: Room, count: int, team_name: str, class_name: str) -> Verdict:
    """The outcome `reservation_create` would give `count` GPUs now, in words."""
    asked = gpus_text(count)
    if count <= room.quota_left:
        if count <= room.free_gpus:
            return Verdict("in_quota", f"{asked} within quota: "
                           f"{'it is' if count == 1 else 'they are'} assigned as soon as you "
                           "reserve.")
        return Verdict("no_capacity", f"Only {room.free_gpus} free for this whole window: a "
                       f"request for {count} would be refused.")
    if count > room.ceiling:
        return Verdict("impossible", f"A request for {count} would be refused: other teams' "
                       f"guaranteed quotas leave {team_name} at most "
                       f"{gpus_text(room.ceiling, class_name)} in this window.")
    if count <= room.can_get:
        return Verdict("over_quota", f"A request for {count} goes beyond {team_name}'s quota: "
                       f"it will wait for an admin's approval (up to {room.can_get} could be "
                       "granted now).")
    return Verdict("over_quota_blocked", f"A request for {count} goes beyond {team_name}'s "
                   f"quota: it will wait for an admin's approval, but only {room.can_get} "
                   "could be approved now (the rest is other teams' unused quota, kept for "
                   "them).")
