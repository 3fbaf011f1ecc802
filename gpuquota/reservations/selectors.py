from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.core.paginator import Page, Paginator
from django.db.models import F, Max, Prefetch, Q, QuerySet
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import is_admin
from accounts.selectors import teams_visible
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import Gpu, GpuClass, MaintenanceBlock
from gpuquota.reservations.capacity import counted_rows, free_map
from gpuquota.reservations.models import Assignment, Quota, Reservation
from gpuquota.reservations.room import ClassLedger, Room

S = Reservation.Status


def quotas_current(*, team: Team, at: datetime | None = None) -> QuerySet[Quota]:
    """The team's quota rows in force at `at` (default now), per class."""
    at = at or timezone.now()
    return (
        Quota.objects.filter(team=team, valid_from__lte=at)
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at))
        .select_related("gpu_class")
        .order_by("gpu_class__name")
    )


@dataclass
class QuotaUse:
    gpu_class: GpuClass
    quota: int
    used_now: int

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used_now / self.quota)) if self.quota else 100


def quota_usage(*, team: Team, at: datetime | None = None) -> list[QuotaUse]:
    """Per class: the team's quota now and how many GPUs it holds now (counted)."""
    at = at or timezone.now()
    quotas = {q.gpu_class_id: q for q in quotas_current(team=team, at=at)}
    held: dict[int, int] = {}
    for a in Assignment.objects.filter(
        reservation__team=team, reservation__status__in=[S.SCHEDULED, S.ACTIVE],
        assigned_from__lte=at, assigned_until__gt=at,
    ).values_list("reservation__gpu_class_id", flat=True):
        held[a] = held.get(a, 0) + 1
    classes = GpuClass.objects.filter(id__in=set(quotas) | set(held)).order_by("name")
    return [
        QuotaUse(c, quotas[c.id].gpus if c.id in quotas else 0, held.get(c.id, 0)) for c in classes
    ]


def _with_assignments(qs: QuerySet[Reservation]) -> QuerySet[Reservation]:
    live = Assignment.objects.exclude(assigned_until=F("assigned_from")).select_related(
        "gpu", "gpu__node").order_by("gpu__node__hostname", "gpu__index", "assigned_from")
    return (
        qs.select_related("team", "gpu_class", "requested_by", "decided_by")
        .prefetch_related(Prefetch("assignments", queryset=live, to_attr="live_assignments"))
        .annotate(effective_end=Max("assignments__assigned_until"))
    )


@dataclass
class TeamReservations:
    pending: list[Reservation] = field(default_factory=list)
    current: list[Reservation] = field(default_factory=list)
    upcoming: list[Reservation] = field(default_factory=list)
    past: list[Reservation] = field(default_factory=list)
    past_page: Page | None = None


PAST_PER_PAGE = 20


def team_reservations(*, team: Team, now: datetime | None = None, past_page: int = 1,
                      per_page: int = PAST_PER_PAGE) -> TeamReservations:
    """The team's reservations split into pending, current, upcoming and past; past ones
    (newest first) a page at a time (`past_page`, out-of-range numbers give the last)."""
    now = now or timezone.now()
    out = TeamReservations()
    qs = _with_assignments(Reservation.objects.filter(team=team)).order_by("start", "id")
    overdue = []  # still counted but past their effective end: the clock has not moved them
    for r in qs.filter(Q(status=S.PENDING) | Q(status__in=[S.SCHEDULED, S.ACTIVE])):
        if r.status == S.PENDING:
            out.pending.append(r)
        elif r.start > now:
            out.upcoming.append(r)
        elif r.effective_end and r.effective_end > now:
            out.current.append(r)
        else:
            overdue.append(r)
    ended = qs.filter(status__in=[S.ENDED, S.CANCELLED, S.DENIED]).order_by("-start", "-id")
    out.past_page = Paginator(ended, per_page).get_page(past_page)
    out.past = (overdue if out.past_page.number == 1 else []) + list(out.past_page)
    return out


def reservation_with_gpus(*, pk: int) -> Reservation:
    """One reservation with its GPUs (node, index) loaded."""
    return _with_assignments(Reservation.objects.filter(pk=pk)).get()


def reservations_pending() -> list[Reservation]:
    """Over-quota requests waiting for an admin, oldest first, each with the team's
    quota then (`quota_gpus`), what the team could get over the window now (`room`) and
    the number an approval now would work with (`approvable`: what `reservation_approve`
    checks, net of other teams' unused guarantees when still over quota). One ledger
    per class: the query count does not grow with the number of requests."""
    rows = list(_with_assignments(Reservation.objects.filter(status=S.PENDING)).order_by(
        "requested_at", "id"))
    now = timezone.now().replace(microsecond=0)
    by_class: dict[int, list[Reservation]] = {}
    for r in rows:
        r.quota_gpus, r.room, r.approvable = 0, None, 0
        if r.end > max(r.start, now):
            by_class.setdefault(r.gpu_class_id, []).append(r)
    for waiting in by_class.values():
        start = max(min(r.start for r in waiting), now)
        ledger = ClassLedger(gpu_class=waiting[0].gpu_class, start=start,
                             end=max(r.end for r in waiting))
        for r in waiting:
            window_start = max(r.start, now)
            r.quota_gpus = ledger.quota_at(team_id=r.team_id, at=window_start)
            r.room = ledger.room(team_id=r.team_id, start=window_start, end=r.end,
                                 same_node=r.placement == Reservation.Placement.SAME_NODE)
            r.approvable = r.room.approvable(r.count)
    return rows


def reservations_visible(*, user: User) -> QuerySet[Reservation]:
    """Reservations of the teams the user may read (all for admins), newest first."""
    qs = Reservation.objects.all()
    if not is_admin(user):
        qs = qs.filter(team__in=teams_visible(user=user))
    return _with_assignments(qs).order_by("-start", "-id")


def audit_visible(*, user: User) -> QuerySet[AuditEntry]:
    """Audit entries: all for admins, else those of the user's teams."""
    qs = AuditEntry.objects.select_related("actor", "team")
    if is_admin(user):
        return qs
    return qs.filter(team__in=teams_visible(user=user))


def gpu_classes_reservable() -> QuerySet[GpuClass]:
    """Classes with at least one physical GPU in service."""
    now = timezone.now()
    ids = Gpu.objects.filter(parent__isnull=True).filter(
        Q(retired_at__isnull=True) | Q(retired_at__gt=now)).values("gpu_class_id")
    return GpuClass.objects.filter(id__in=ids).order_by("name")


@dataclass
class AvailabilityCell:
    day: date
    free_all_day: int
    free_min: int
    free_max: int
    total: int
    room: Room | None = None  # for the form's team: within quota, beyond it

    @property
    def level(self) -> str:
        """The cell's colour: with a team, whether it can have all its quota left at once
        (high), only part of it or only with approval (mid), or nothing (none); without one,
        the fleet's free share."""
        if self.room is not None:
            room = self.room
            if room.can_get == 0:
                return "none"
            return "high" if room.quota_left and room.within_quota >= room.quota_left else "mid"
        if self.total == 0 or self.free_max == 0:
            return "none"
        ratio = self.free_all_day / self.total
        return "high" if ratio >= 0.5 else "mid" if ratio >= 0.2 else "low"


@dataclass
class AvailabilityRow:
    gpu_class: GpuClass
    total: int
    cells: list[AvailabilityCell]


def availability(*, tz: ZoneInfo, days: int = 14, today: date | None = None,
                 gpu_classes=None, team: Team | None = None) -> list[AvailabilityRow]:
    """Per class and local day (in `tz`) of the coming `days`: GPUs free all day,
    and the fewest and most free at any instant of it; with `team`, what the team can
    get that day within its quota and beyond it (`room`, as the form and approval say)."""
    now = timezone.now().replace(microsecond=0)
    today = today or timezone.localtime(now, tz).date()
    bounds = [datetime.combine(today + timedelta(days=d), time(), tzinfo=tz)
              for d in range(days + 1)]
    bounds[0] = max(bounds[0], min(now, bounds[1]))  # today: from now on
    rows = []
    for gpu_class in gpu_classes if gpu_classes is not None else gpu_classes_reservable():
        fmap = free_map(gpu_class=gpu_class, start=bounds[0], end=bounds[-1])
        ledger = None if team is None else ClassLedger(
            gpu_class=gpu_class, start=bounds[0], end=bounds[-1], fmap=fmap)
        total = len(fmap.gpus)
        cells = []
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            points = [lo] + sorted(p for p in fmap.breakpoints() if lo < p < hi)
            counts = [fmap.free_count_at(p) for p in points]
            day = timezone.localtime(lo, tz).date()
            room = ledger.room(team_id=team.id, start=lo, end=hi) if ledger else None
            cells.append(AvailabilityCell(day, len(fmap.gpus_free_over(lo, hi)),
                                          min(counts), max(counts), total, room))
        rows.append(AvailabilityRow(gpu_class, total, cells))
    return rows


def window_availability(*, gpu_class: GpuClass, start: datetime, end: datetime) -> dict:
    """GPUs of a class free over the whole window, out of those in service then."""
    fmap = free_map(gpu_class=gpu_class, start=start, end=end)
    return {"gpu_class": gpu_class.name, "start": start, "end": end,
            "total_gpus": len(fmap.gpus), "free_gpus": len(fmap.gpus_free_over(start, end))}


def team_held_now(*, team: Team, gpu_class: GpuClass, at: datetime) -> int:
    """GPUs of the class the team holds at `at` (counted against quota)."""
    return len(counted_rows(gpu_class=gpu_class, start=at, end=at + timedelta(seconds=1),
                            team_id=team.id))


def maintenance_blocks_recent(*, limit: int = 50) -> QuerySet[MaintenanceBlock]:
    """The latest maintenance blocks, newest first, with GPU and node."""
    return MaintenanceBlock.objects.select_related(
        "gpu__node", "gpu__gpu_class", "created_by").order_by("-valid_from")[:limit]


def quotas_listed(*, team: Team | None = None, gpu_class: GpuClass | None = None
                  ) -> QuerySet[Quota]:
    """Every quota row over time (optionally of one team and/or class), by team, class
    and start."""
    rows = Quota.objects.select_related("team", "gpu_class")
    if team is not None:
        rows = rows.filter(team=team)
    if gpu_class is not None:
        rows = rows.filter(gpu_class=gpu_class)
    return rows.order_by("team__name", "gpu_class__name", "valid_from")


def reservations_filtered(*, team: Team | None = None, gpu_class: GpuClass | None = None,
                          status: str | None = None, start: datetime | None = None,
                          end: datetime | None = None) -> QuerySet[Reservation]:
    """All reservations (admins' list), newest first, with GPUs and effective end;
    `start`/`end`: those whose window overlaps [start, end)."""
    qs = Reservation.objects.all()
    if team is not None:
        qs = qs.filter(team=team)
    if gpu_class is not None:
        qs = qs.filter(gpu_class=gpu_class)
    if status:
        qs = qs.filter(status=status)
    if start is not None:
        qs = qs.filter(end__gt=start)
    if end is not None:
        qs = qs.filter(start__lt=end)
    return _with_assignments(qs).order_by("-start", "-id")
