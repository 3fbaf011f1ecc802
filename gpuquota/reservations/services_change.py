"""Changing a reservation that holds GPUs (extend, shrink, swap) and taking GPUs
out of capacity for maintenance. Rules: docs/accounting.md, Reservation."""

from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from gpuquota.core.contributions import hooks_call
from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Gpu, MaintenanceBlock
from gpuquota.reservations.assigning import (
    NoCapacity,
    OverQuota,
    lock_team_class,
    no_capacity_error,
)
from gpuquota.reservations.capacity import free_map, gpus_by_node, quota_check
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import (
    MAX_WINDOW,
    S,
    assignments_end,
    effective_end,
    horizon_check,
    mark_past_dirty,
    require_admin_actor,
    require_team_actor,
)


def _running(reservation: Reservation, now: datetime) -> list[Assignment]:
    return list(
        reservation.assignments.filter(assigned_until__gt=now)
        .select_related("gpu", "gpu__node").order_by("gpu__node__hostname", "gpu__index")
    )


def _locked_holding(reservation: Reservation) -> Reservation:
    lock_team_class(team_id=reservation.team_id, gpu_class_id=reservation.gpu_class_id)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if reservation.status not in (S.SCHEDULED, S.ACTIVE):
        raise Conflict(f"A {reservation.status} reservation holds no GPUs to change.")
    return reservation


@transaction.atomic
def reservation_extend(
    *, reservation: Reservation, actor: User, end: datetime, reason: str = "",
    now: datetime | None = None,
) -> Reservation:
    """Move the end later for every GPU still held to the current end, when the
    reservation has not ended and quota and capacity allow."""
    now = whole_second(now or timezone.now())
    end = whole_second(end)
    require_team_actor(actor=actor, team=reservation.team)
    reservation = _locked_holding(reservation)
    current_end = effective_end(reservation)
    if current_end is None or current_end <= now:
        raise Conflict("It has already ended and cannot be extended.", field="end")
    if end <= reservation.end:
        raise DomainError("The new end must be after the current end.", field="end")
    if end - reservation.start > MAX_WINDOW:
        raise DomainError("A reservation lasts at most 366 days.", field="end")
    horizon_check(instant=end, now=now, field="end")
    held = list(reservation.assignments.filter(assigned_until=reservation.end)
                .exclude(assigned_from=reservation.end).select_related("gpu"))
    old_end = reservation.end
    # the added time is new reserved time: a budget may refuse it (reports)
    hooks_call("RESERVATION_REQUESTED", team=reservation.team, gpu_class=reservation.gpu_class,
               count=len(held), start=old_end, end=end, now=now)
    check = quota_check(team_id=reservation.team_id, gpu_class=reservation.gpu_class,
                        start=old_end, end=end, count=len(held))
    if not check.in_quota:
        raise OverQuota(
            f"Over quota: the team is guaranteed {check.quota_at_worst} "
            f"{reservation.gpu_class.name} GPU(s) and already holds {check.counted_at_worst} "
            "then. Ask for a new reservation instead.",
            field="end",
        )
    free_ids = {g.id for g in free_map(gpu_class=reservation.gpu_class, start=old_end,
                                       end=end).gpus_free_over(old_end, end)}
    taken = [a.gpu for a in held if a.gpu_id not in free_ids]
    if taken:
        raise NoCapacity(
            "No capacity: " + ", ".join(str(g.index) for g in taken)
            + " of the held GPUs are booked or unavailable after the current end.",
            field="end",
        )
    try:
        with transaction.atomic():
            Assignment.objects.filter(pk__in=[a.pk for a in held]).update(assigned_until=end)
    except IntegrityError as exc:
        raise NoCapacity("No capacity: a concurrent request took the GPUs.", field="end") from exc
    reservation.end = end
    reservation.save(update_fields=["end"])
    audit_record(actor=actor, action="reservation.extend", obj=reservation, team=reservation.team,
                 changes={"end": [old_end.isoformat(), end.isoformat()]}, reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} extended")
    return reservation


@transaction.atomic
def reservation_shrink(
    *, reservation: Reservation, actor: User, count: int, reason: str = "",
    now: datetime | None = None,
) -> Reservation:
    """Keep `count` of the GPUs held and end the others now (at the start if not begun)."""
    now = whole_second(now or timezone.now())
    require_team_actor(actor=actor, team=reservation.team)
    reservation = _locked_holding(reservation)
    running = _running(reservation, now)
    if not isinstance(count, int) or count < 1 or count >= len(running):
        raise DomainError(
            f"Keep between 1 and {len(running) - 1} of the {len(running)} GPUs held.",
            field="count",
        )
    # keep the GPUs on the nodes where the reservation holds most
    by_node = sorted(gpus_by_node([a.gpu for a in running]).values(), key=lambda g: -len(g))
    keep = {g.id for g in [gpu for node in by_node for gpu in node][:count]}
    dropped = [a for a in running if a.gpu_id not in keep]
    changed = assignments_end(assignments=dropped, at=now,
                              end_reason=Assignment.EndReason.SHRUNK, now=now)
    before, reservation.count = reservation.count, count
    reservation.save(update_fields=["count"])
    audit_record(actor=actor, action="reservation.shrink", obj=reservation, team=reservation.team,
                 changes={"count": [before, count], "assignments": changed}, reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk} shrunk")
    return reservation


def _replacement_for(
    reservation: Reservation, old: Assignment, at: datetime, replacement: Gpu | None
) -> Gpu:
    fmap = free_map(gpu_class=reservation.gpu_class, start=at, end=old.assigned_until)
    free = fmap.gpus_free_over(at, old.assigned_until)
    if replacement is not None:
        if replacement.gpu_class_id != reservation.gpu_class_id or replacement.parent_id:
            raise DomainError(
                f"The replacement must be a {reservation.gpu_class.name} GPU.", field="replacement"
            )
        if replacement.id not in {g.id for g in free}:
            raise NoCapacity("That replacement GPU is not free for the rest of the reservation.",
                             field="replacement")
        return replacement
    if not free:
        raise no_capacity_error(gpu_class=reservation.gpu_class, start=at,
                                end=old.assigned_until, count=1, free_gpus=0)
    same_node = [g for g in free if g.node_id == old.gpu.node_id]
    return (same_node or free)[0]


@transaction.atomic
def reservation_swap_gpu(
    *, reservation: Reservation, actor: User, gpu: Gpu, replacement: Gpu | None = None,
    reason: str = "", now: datetime | None = None,
) -> Assignment:
    """Replace one held GPU by a free one of the same class from now (or the start)."""
    now = whole_second(now or timezone.now())
    require_team_actor(actor=actor, team=reservation.team)
    reservation = _locked_holding(reservation)
    old = next((a for a in _running(reservation, now) if a.gpu_id == gpu.id), None)
    if old is None:
        raise DomainError("This reservation does not hold that GPU now.", field="gpu")
    at = max(now, old.assigned_from)
    new_gpu = _replacement_for(reservation, old, at, replacement)
    until = old.assigned_until
    assignments_end(assignments=[old], at=at, end_reason=Assignment.EndReason.SWAPPED, now=now)
    try:
        with transaction.atomic():
            new = Assignment.objects.create(reservation=reservation, gpu=new_gpu,
                                            assigned_from=at, assigned_until=until)
    except IntegrityError as exc:
        raise NoCapacity("No capacity: a concurrent request took the replacement.",
                         field="replacement") from exc
    mark_past_dirty(gpu_ids=[new_gpu.id], start=at, end=until, now=now)
    audit_record(actor=actor, action="reservation.swap", obj=reservation, team=reservation.team,
                 changes={"from_gpu": gpu.uuid, "to_gpu": new_gpu.uuid, "at": at.isoformat()},
                 reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"reservation {reservation.pk}: a GPU swapped")
    return new


@transaction.atomic
def maintenance_block_create(
    *, gpu: Gpu, start: datetime, end: datetime | None, reason: str, actor: User,
    now: datetime | None = None,
) -> MaintenanceBlock:
    """Take a GPU out of capacity over [start, end); refused while it is assigned then."""
    require_admin_actor(actor=actor)
    start, end = whole_second(start), whole_second(end)
    if gpu.parent_id:
        raise DomainError("Block the physical GPU, not a MIG device.", field="gpu")
    if end is not None and end <= start:
        raise DomainError("The end must be after the start.", field="end")
    if not reason.strip():
        raise DomainError("Say why the GPU is blocked.", field="reason")
    clash = (
        Assignment.objects.filter(
            gpu=gpu, assigned_from__lt=end or datetime.max.replace(tzinfo=UTC),
            assigned_until__gt=start,
        )
        .exclude(assigned_until=F("assigned_from"))
        .first()
    )
    if clash is not None:
        raise Conflict(
            f"GPU is assigned to reservation #{clash.reservation_id} in that window; "
            "swap it out first.", field="gpu",
        )
    block = MaintenanceBlock.objects.create(gpu=gpu, valid_from=start, valid_until=end,
                                            reason=reason, created_by=actor)
    audit_record(actor=actor, action="maintenance.block", obj=block, team=None,
                 changes={"gpu": gpu.uuid, "from": start.isoformat(),
                          "until": end.isoformat() if end else None}, reason=reason)
    hooks_call("RESERVATIONS_CHANGED", reason=f"maintenance block {block.pk}")
    return block

