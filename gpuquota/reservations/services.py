"""Reservation lifecycle: request, approve, deny, cancel, release, lifecycle advance.

Changes to a running reservation (extend, shrink, swap) and maintenance blocks
are in `services_change.py`. Rules: docs/accounting.md, Quota and Reservation.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import can_act_for_team, is_admin
from gpuquota.core.contributions import contributed, hooks_call
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import GpuClass
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.assigning import (
    NoCapacity,
    OverQuota,
    assignments_create,
    local_text,
    lock_class_guarantees,
    lock_team_class,
)
from gpuquota.reservations.capacity import free_map, guarantee_shortfall_at, quota_check
from gpuquota.reservations.conf import booking_horizon_days, booking_horizon_end
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.notices import reservation_decision_notify, reservation_pending_notify
from gpuquota.reservations.room import ClassLedger, gpus_text

__all__ = [
    "NoCapacity", "OverQuota", "reservation_create", "reservation_approve", "reservation_deny",
    "reservation_cancel", "reservation_release", "reservations_advance",
]

LEAD_START_TOLERANCE = timedelta(minutes=5)
COUNT_AT_LEAST_ONE = "Ask for at least 1 GPU."
START_IN_THE_PAST = "The start cannot be in the past (5 minutes of tolerance)."
MAX_GPUS_PER_REQUEST = 512
MAX_WINDOW = timedelta(days=366)
S = Reservation.Status


def require_team_actor(*, actor: User, team: Team) -> None:
    if not can_act_for_team(actor, team):
        raise PermissionDenied("Only the team's leads and admins can do this.")


def require_admin_actor(*, actor: User) -> None:
    if not is_admin(actor):
        raise PermissionDenied("Only platform admins can do this.")


def mark_past_dirty(*, gpu_ids: list[int], start: datetime, end: datetime, now: datetime) -> None:
    """Mark usage of [start, end) clipped at now for recompute; an interval that
    begins now marks the hour in progress."""
    if not gpu_ids or start > now:
        return
    hi = max(min(end, now), start + timedelta(seconds=1))
    gpu_interval_mark_dirty(gpu_ids=gpu_ids, start=start, end=hi)


def horizon_check(*, instant: datetime, now: datetime, field: str) -> None:
    """Refuse an instant beyond the booking horizon, saying the date it ends."""
    horizon_end = booking_horizon_end(now=now)
    if instant > horizon_end:
        raise DomainError(
            f"Bookings reach at most {booking_horizon_days()} days ahead: "
            f"until {horizon_end:%Y-%m-%d %H:%M} UTC.", field=field)


def validate_request(
    *, count: int, start: datetime, end: datetime, actor: User, now: datetime
) -> bool:
    """Check a requested window and size; True when it is an admin's backfill."""
    if not isinstance(count, int) or count < 1:
        raise DomainError(COUNT_AT_LEAST_ONE, field="count")
    if count > MAX_GPUS_PER_REQUEST:
        raise DomainError(f"At most {MAX_GPUS_PER_REQUEST} GPUs per request.", field="count")
    if start.tzinfo is None or end.tzinfo is None:
        raise DomainError("Times must carry a time zone.", field="start")
    if end <= start:
        raise DomainError("The end must be after the start.", field="end")
    backfill = start < now - LEAD_START_TOLERANCE
    if backfill and not is_admin(actor):
        raise DomainError(START_IN_THE_PAST, field="start")
    if end - start > MAX_WINDOW:
        raise DomainError("A reservation lasts at most 366 days.", field="end")
    horizon_check(instant=start, now=now, field="start")
    horizon_check(instant=end, now=now, field="end")
    return backfill


def _status_for(*, start: datetime, end: datetime, now: datetime) -> str:
    if end <= now:
        return S.ENDED
    return S.ACTIVE if start <= now else S.SCHEDULED


def _window_changes(reservation: Reservation) -> dict:
    return {
        "team": reservation.team.slug, "gpu_class": reservation.gpu_class.name,
        "count": reservation.count, "start": reservation.start.isoformat(),
        "end": reservation.end.isoformat(), "placement": reservation.placement,
        "status": reservation.status, "over_quota": reservation.over_quota,
        "is_backfill": reservation.is_backfill,
    }


def _gpu_list(assignments: list[Assignment]) -> list[str]:
    return [f"{a.gpu.node.hostname}/{a.gpu.index} {a.gpu.uuid}" for a in assignments]


@transaction.atomic
def reservation_create(
    *,
    team: Team,
    gpu_class: GpuClass,
    count: int,
    start: datetime,
    end: datetime,
    requested_by: User,
    placement: str = Reservation.Placement.ANY,
    purpose: str = "",
    now: datetime | None = None,
) -> Reservation:
    """A request that is scheduled with GPUs assigned when in quota, pending (holding
    nothing) when over quota, or refused; an admin's past window is a backfill."""
    now = whole_second(now or timezone.now())
    start, end = whole_second(start), whole_second(end)
    require_team_actor(actor=requested_by, team=team)
    if placement not in Reservation.Placement.values:
        raise DomainError("Placement is `any` or `same_node`.", field="placement")
    backfill = validate_request(count=count, start=start, end=end, actor=requested_by, now=now)
    if backfill:  # it may need the guarantee check below: hold every team's lock
        lock_class_guarantees(team_id=team.id, gpu_class_id=gpu_class.id)
    else:
        lock_team_class(team_id=team.id, gpu_class_id=gpu_class.id)
    if not backfill:  # e.g. a budget refusing it (reports): never what already runs
        hooks_call("RESERVATION_REQUESTED", team=team, gpu_class=gpu_class, count=count,
                   start=start, end=end, now=now)
    check = quota_check(team_id=team.id, gpu_class=gpu_class, start=start, end=end, count=count)
    if not check.in_quota and not backfill:
        _refuse_impossible(team=team, gpu_class=gpu_class, start=start, end=end, count=count,
                           same_node=placement == Reservation.Placement.SAME_NODE)
    reservation = Reservation.objects.create(
        team=team, gpu_class=gpu_class, count=count, start=start, end=end, placement=placement,
        purpose=purpose[:256], requested_by=requested_by, requested_at=now,
        over_quota=not check.in_quota, is_backfill=backfill,
        status=S.PENDING if not (check.in_quota or backfill) else _status_for(
            start=start, end=end, now=now),
    )
    if backfill and not check.in_quota and end > now and not quota_check(
        team_id=team.id, gpu_class=gpu_class, start=now, end=end, count=count
    ).in_quota:
        _approval_capacity(reservation, now, verb="record")
    assignments = []
    if reservation.status != S.PENDING:
        assignments = assignments_create(reservation=reservation, start=start, end=end, count=count)
    if start < now:  # a backfill, or a start within the tolerance: seconds already past
        mark_past_dirty(gpu_ids=[a.gpu_id for a in assignments], start=start, end=end, now=now)
    audit_record(
        actor=requested_by, action="reservation.backfill" if backfill else "reservation.request",
        obj=reservation, team=team,
        changes={**_window_changes(reservation), "gpus": _gpu_list(assignments)},
        reason=purpose,
    )
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} created")
    if reservation.status == S.PENDING:
        reservation_pending_notify(reservation)  # mailed after commit
    return reservation


def _refuse_impossible(*, team: Team, gpu_class: GpuClass, start: datetime, end: datetime,
                       count: int, same_node: bool) -> None:
    """An over-quota request that no approval could ever meet is refused now rather than
    left pending: more GPUs than the class has in service then, more on one node than
    its largest node has, or more than other teams' guarantees can ever leave."""
    fmap = free_map(gpu_class=gpu_class, start=start, end=end)
    ledger = ClassLedger(gpu_class=gpu_class, start=start, end=end, fmap=fmap)
    in_service = len(fmap.gpus)
    if count > in_service:
        # The most to ask for is this team's ceiling, the number the form's hint gives.
        most = ledger.ceiling(team_id=team.id, start=start, end=end, same_node=same_node)
        left = "" if most == in_service else f", what other teams' quotas leave {team}"
        free = len(fmap.gpus_free_over(start, end))
        raise NoCapacity(
            f"No capacity: {count} asked, but only {gpus_text(in_service, gpu_class.name)} "
            f"{'is' if in_service == 1 else 'are'} in service in that window, never enough at "
            f"once ({free} {'is' if free == 1 else 'are'} free for all of it); ask for at most "
            f"{most}{left}.",
            field="count", free_gpus=free,
        )
    largest = ledger.largest_node()
    if same_node and count > largest:
        raise NoCapacity(
            f"No capacity: no {gpu_class.name} node has {count} GPUs (the largest has "
            f"{largest}); ask for at most {largest} on one node, or for any node.",
            field="count", free_gpus=ledger.free_over(start=start, end=end, same_node=True),
        )
    ceiling = ledger.ceiling(team_id=team.id, start=start, end=end, same_node=same_node)
    if count > ceiling:
        guaranteed = ledger.others_guaranteed(team_id=team.id, start=start, end=end)
        raise NoCapacity(
            f"No capacity: {count} asked, but other teams' guaranteed quotas ({guaranteed} of "
            f"the {in_service} in service) leave {team} at most "
            f"{gpus_text(ceiling, gpu_class.name)} in that window.",
            field="count", free_gpus=ceiling,
        )


def _approval_capacity(reservation: Reservation, start: datetime, verb: str = "approve"
                       ) -> None:
    """Refuse an over-quota approval (or backfill running into the future) that lacks
    GPUs or eats another team's guarantee from `start` on."""
    gpu_class, end, count = reservation.gpu_class, reservation.end, reservation.count
    fmap = free_map(gpu_class=gpu_class, start=start, end=end)
    shortfall = guarantee_shortfall_at(
        team_id=reservation.team_id, gpu_class=gpu_class, start=start, end=end, count=count,
        fmap=fmap,
    )
    if shortfall is not None:
        at, usable = shortfall
        raise NoCapacity(
            f"Cannot {verb}: at {local_text(at)} only {usable} {gpu_class.name} GPU(s) are "
            f"free beyond other teams' unused guarantees, {count} asked.",
            field=None, free_gpus=usable,
        )


@transaction.atomic
def reservation_approve(
    *, reservation: Reservation, actor: User, reason: str = "", now: datetime | None = None
) -> Reservation:
    """Approve a pending request: assign GPUs now if capacity (and other teams'
    guarantees) allow, else refuse with the reason and change nothing."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    lock_class_guarantees(team_id=reservation.team_id, gpu_class_id=reservation.gpu_class_id)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if reservation.status != S.PENDING:
        raise Conflict(f"Only pending requests can be approved; this one is {reservation.status}.")
    if reservation.end <= now:
        raise Conflict("Cannot approve: the requested window has already passed.")
    start = max(reservation.start, now)
    # approving books its reserved time from `start`: a budget may refuse it (reports), as
    # it would a new request; a pending request is not in the forecast, so nothing counts twice
    hooks_call("RESERVATION_REQUESTED", team=reservation.team, gpu_class=reservation.gpu_class,
               count=reservation.count, start=start, end=reservation.end, now=now)
    check = quota_check(team_id=reservation.team_id, gpu_class=reservation.gpu_class,
                        start=start, end=reservation.end, count=reservation.count)
    if not check.in_quota:
        _approval_capacity(reservation, start)
    assignments = assignments_create(
        reservation=reservation, start=start, end=reservation.end, count=reservation.count
    )
    reservation.status = _status_for(start=start, end=reservation.end, now=now)
    reservation.approved_at = now
    reservation.decided_by = actor
    reservation.decision_reason = reason
    reservation.save(update_fields=["status", "approved_at", "decided_by", "decision_reason"])
    audit_record(
        actor=actor, action="reservation.approve", obj=reservation, team=reservation.team,
        changes={"status": [S.PENDING, reservation.status], "gpus": _gpu_list(assignments),
                 "charged_from": start.isoformat()},
        reason=reason,
    )
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} approved")
    reservation_decision_notify(reservation, decision="approved")  # mailed after commit
    return reservation


@transaction.atomic
def reservation_deny(
    *, reservation: Reservation, actor: User, reason: str, now: datetime | None = None
) -> Reservation:
    """Deny a pending request with a reason; it holds nothing and is never charged."""
    now = whole_second(now or timezone.now())
    require_admin_actor(actor=actor)
    if not reason.strip():
        raise DomainError("Say why the request is denied.", field="reason")
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if reservation.status != S.PENDING:
        raise Conflict(f"Only pending requests can be denied; this one is {reservation.status}.")
    reservation.status = S.DENIED
    reservation.decided_by = actor
    reservation.decision_reason = reason
    reservation.save(update_fields=["status", "decided_by", "decision_reason"])
    audit_record(actor=actor, action="reservation.deny", obj=reservation, team=reservation.team,
                 changes={"status": [S.PENDING, S.DENIED]}, reason=reason)
    reservation_decision_notify(reservation, decision="denied")  # mailed after commit
    return reservation


@transaction.atomic
def reservation_cancel(
    *, reservation: Reservation, actor: User, reason: str = "", now: datetime | None = None
) -> Reservation:
    """Cancel before the start: a pending request simply ends; a scheduled one's
    assignments end at `start` (zero seconds)."""
    now = whole_second(now or timezone.now())
    require_team_actor(actor=actor, team=reservation.team)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = reservation.status
    if before not in (S.PENDING, S.SCHEDULED):
        raise Conflict(f"A {before} reservation cannot be cancelled.")
    if before == S.SCHEDULED and reservation.start <= now:
        raise Conflict("It has already started: release it instead.")
    assignments = list(reservation.assignments.select_related("gpu"))
    for assignment in assignments:
        assignment.assigned_until = assignment.assigned_from
        assignment.end_reason = Assignment.EndReason.CANCELLED
    Assignment.objects.bulk_update(assignments, ["assigned_until", "end_reason"])
    mark_past_dirty(gpu_ids=[a.gpu_id for a in assignments], start=reservation.start,
                    end=reservation.start, now=now)
    reservation.status = S.CANCELLED
    reservation.save(update_fields=["status"])
    audit_record(actor=actor, action="reservation.cancel", obj=reservation, team=reservation.team,
                 changes={"status": [before, S.CANCELLED]}, reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} cancelled")
    return reservation


def assignments_end(
    *, assignments: list[Assignment], at: datetime, end_reason: str, now: datetime
) -> list[dict]:
    """End running assignments at `at` (never before they began); marks usage dirty."""
    changed = []
    for assignment in assignments:
        until = max(at, assignment.assigned_from)
        if until >= assignment.assigned_until:
            continue
        changed.append({"gpu": assignment.gpu.uuid, "until": [
            assignment.assigned_until.isoformat(), until.isoformat()]})
        old_until = assignment.assigned_until
        for hook in contributed("ASSIGNMENT_ENDING"):  # lending: the loans end with it
            hook(assignment=assignment, at=until)
        assignment.assigned_until = until
        assignment.end_reason = end_reason
        assignment.save(update_fields=["assigned_until", "end_reason"])
        mark_past_dirty(gpu_ids=[assignment.gpu_id], start=until, end=old_until, now=now)
    return changed


@transaction.atomic
def reservation_release(
    *, reservation: Reservation, actor: User, reason: str = "", now: datetime | None = None
) -> Reservation:
    """Give every GPU of an active reservation back now; it ends."""
    now = whole_second(now or timezone.now())
    require_team_actor(actor=actor, team=reservation.team)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if reservation.status == S.SCHEDULED and reservation.start > now:
        raise Conflict("It has not started yet: cancel it instead.")
    if reservation.status not in (S.ACTIVE, S.SCHEDULED):
        raise Conflict(f"A {reservation.status} reservation cannot be released.")
    running = list(reservation.assignments.filter(assigned_until__gt=now).select_related("gpu"))
    changed = assignments_end(assignments=running, at=now,
                              end_reason=Assignment.EndReason.RELEASED, now=now)
    before, reservation.status = reservation.status, S.ENDED
    reservation.save(update_fields=["status"])
    audit_record(actor=actor, action="reservation.release", obj=reservation, team=reservation.team,
                 changes={"status": [before, S.ENDED], "assignments": changed}, reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} released")
    return reservation


def effective_end(reservation: Reservation) -> datetime | None:
    """The latest `assigned_until` of the reservation (None without assignments)."""
    return reservation.assignments.aggregate(end=Max("assigned_until"))["end"]


@transaction.atomic
def reservations_advance(*, now: datetime | None = None) -> dict[str, int]:
    """Move reservations along scheduled → active → ended by the clock, and deny
    pending requests whose window passed undecided. Safe to run any number of times."""
    now = whole_second(now or timezone.now())
    moved = {"activated": 0, "ended": 0, "expired": 0}
    ending_ids = (
        Reservation.objects.filter(status__in=[S.SCHEDULED, S.ACTIVE])
        .annotate(effective_end=Max("assignments__assigned_until"))
        .filter(effective_end__lte=now)
        .values_list("id", flat=True)
    )
    for reservation in Reservation.objects.select_for_update().filter(
        id__in=list(ending_ids), status__in=[S.SCHEDULED, S.ACTIVE]
    ):
        before, reservation.status = reservation.status, S.ENDED
        reservation.save(update_fields=["status"])
        audit_record(actor=None, action="reservation.end", obj=reservation, team=reservation.team,
                     changes={"status": [before, S.ENDED]}, reason="reached its end")
        moved["ended"] += 1
    for reservation in Reservation.objects.select_for_update().filter(
        status=S.SCHEDULED, start__lte=now
    ):
        reservation.status = S.ACTIVE
        reservation.save(update_fields=["status"])
        audit_record(actor=None, action="reservation.activate", obj=reservation,
                     team=reservation.team, changes={"status": [S.SCHEDULED, S.ACTIVE]})
        moved["activated"] += 1
    for reservation in Reservation.objects.select_for_update().filter(
        status=S.PENDING, end__lte=now
    ):
        reservation.status = S.DENIED
        reservation.decision_reason = "Its window passed before an admin decided."
        reservation.save(update_fields=["status", "decision_reason"])
        audit_record(actor=None, action="reservation.expire", obj=reservation,
                     team=reservation.team, changes={"status": [S.PENDING, S.DENIED]},
                     reason=reservation.decision_reason)
        reservation_decision_notify(reservation, decision="expired")  # mailed after commit
        moved["expired"] += 1
    if moved["activated"] or moved["ended"]:  # reservation edges: limits change
        hooks_call("RESERVATIONS_CHANGED", reason="reservations moved on")
    return moved
