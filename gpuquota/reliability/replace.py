"""A drained GPU's reservations (docs/reliability.md#reservations-on-a-drained-gpu): each
assignment still ahead on it moves to a free GPU of the class on another node, from now
(or its start), and the team's leads are told; where none is free it stays, the team is
told, and the failed time is credited on the statement as always (the `failure_credit` of
accounting.md). Tried again at every drain pass while the drain is open, so a GPU that
frees up later still takes the reservation over."""

from collections import defaultdict
from datetime import datetime

from django.db import IntegrityError, transaction

from accounts.selectors import team_leads
from gpuquota.core.contributions import hooks_call, team_event
from gpuquota.core.services import audit_record
from gpuquota.mail.outbox import mail_send_later
from gpuquota.outbox.render import Message, when_utc
from gpuquota.reliability.models import Drain
from gpuquota.reservations.assigning import lock_team_class
from gpuquota.reservations.capacity import free_map
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.notices import reservation_mail_context
from gpuquota.reservations.services import assignments_end, mark_past_dirty

HOLDING = (Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE)


def _gpu_text(gpu) -> str:
    return f"{gpu.node.hostname}/{gpu.index if gpu.index is not None else '?'} ({gpu.uuid})"


def _pick(reservation: Reservation, old: Assignment, at: datetime, drain: Drain):
    """A free GPU of the class over the rest of the assignment, off the drained node;
    on a node where the reservation holds GPUs already, when one is free there."""
    fmap = free_map(gpu_class=reservation.gpu_class, start=at, end=old.assigned_until)
    free = [g for g in fmap.gpus_free_over(at, old.assigned_until)
            if g.node_id != drain.node_id]
    if not free:
        return None
    held_nodes = set(reservation.assignments.filter(assigned_until__gt=at)
                     .values_list("gpu__node_id", flat=True))
    return min(free, key=lambda g: (g.node_id not in held_nodes, g.node.hostname,
                                    g.index if g.index is not None else 1_000_000, g.id))


def _move(drain: Drain, old: Assignment, now: datetime):
    """Move one assignment off the drained GPU; the new assignment, or None (none free)."""
    reservation = Reservation.objects.select_for_update().get(pk=old.reservation_id)
    if reservation.status not in HOLDING:
        return None
    if reservation.placement == Reservation.Placement.SAME_NODE:
        return None  # its GPUs must stay together: credited, not split across nodes
    at = max(now, old.assigned_from)
    new_gpu = _pick(reservation, old, at, drain)
    if new_gpu is None:
        return None
    until = old.assigned_until
    try:
        with transaction.atomic():
            assignments_end(assignments=[old], at=at, end_reason=Assignment.EndReason.SWAPPED,
                            now=now)
            new = Assignment.objects.create(reservation=reservation, gpu=new_gpu,
                                            assigned_from=at, assigned_until=until)
    except IntegrityError:
        return None  # a concurrent request took it: the next pass looks again
    mark_past_dirty(gpu_ids=[new_gpu.id], start=at, end=until, now=now)
    audit_record(actor=None, action="reservation.swap", obj=reservation, team=reservation.team,
                 changes={"from_gpu": old.gpu.uuid, "to_gpu": new_gpu.uuid,
                          "at": at.isoformat(), "drain": drain.pk},
                 reason=f"drained for {drain.reason}")
    return new


def _notify(drain: Drain, reservation: Reservation, moved: list, kept: bool, now) -> None:
    context = {**reservation_mail_context(reservation), "drain": {
        "id": drain.pk, "reason": drain.reason, "needs": drain.needs, "event_at": drain.event_at,
        "gpu": _gpu_text(drain.gpu), "moved_to": [_gpu_text(a.gpu) for a in moved],
        "kept": kept, "node": drain.node.hostname,
        "node_wide": drain.node_wide,
        "same_node": reservation.placement == Reservation.Placement.SAME_NODE}}
    what = "kept" if kept else "replaced-" + "-".join(str(a.pk) for a in moved)
    key = f"drain:{drain.pk}:reservation:{reservation.pk}:{what}"
    mail_send_later(template="reservation_gpu_drained",
                    recipients=team_leads(team=reservation.team, at=now), context=context,
                    key=key)
    gpu, team = _gpu_text(drain.gpu), reservation.team.name
    outcome = ("no free GPU could replace it: the failed time is credited on the statement"
               if kept else "moved to " + ", ".join(_gpu_text(a.gpu) for a in moved))
    team_event(team_id=reservation.team_id, key=key, message=Message(
        event="gpu.drained",
        title=f"{team}: GPU {gpu} failed and is drained",
        text=f"GPU {gpu} of reservation #{reservation.pk} failed ({drain.reason}): {outcome}.",
        facts=[("Failure", drain.reason), ("At", when_utc(drain.event_at)),
               ("Back after", drain.needs or "an admin's word")],
        data={"drain": drain.pk, "reservation": reservation.pk, "gpu": drain.gpu.uuid,
              "reason": drain.reason, "kept": kept,
              "moved_to": [a.gpu.uuid for a in moved]}))


@transaction.atomic
def drain_reservations_move(*, drain: Drain, now: datetime) -> dict:
    """Move the assignments still ahead on the drained GPU (on any GPU of its node when
    the drain written to the scheduler keeps the whole node from new work);
    {"moved": n, "kept": n}."""
    on = {"gpu__node_id": drain.node_id} if drain.node_wide else {
        "gpu_id": drain.gpu_id}  # written to the scheduler: the whole node is kept from work
    ahead = list(Assignment.objects.filter(assigned_until__gt=now,
                                           reservation__status__in=HOLDING, **on)
                 .select_related("reservation__team", "reservation__gpu_class", "gpu__node")
                 .order_by("reservation_id", "assigned_from"))
    moved: dict[int, list] = defaultdict(list)
    kept: dict[int, Reservation] = {}
    reservations = {}
    for old in ahead:
        reservation = old.reservation
        lock_team_class(team_id=reservation.team_id, gpu_class_id=reservation.gpu_class_id)
        new = _move(drain, old, now)
        reservations[reservation.pk] = reservation
        if new is None:
            kept[reservation.pk] = reservation
        else:
            moved[reservation.pk].append(new)
    for pk, reservation in reservations.items():
        _notify(drain, reservation, moved.get(pk, []), pk in kept, now)
    if moved:
        hooks_call("RESERVATIONS_CHANGED", reason=f"drain {drain.pk}: reservations moved")
    return {"moved": sum(map(len, moved.values())), "kept": len(kept)}


def drains_reservations_move(*, now: datetime) -> dict:
    """Every open drain's reservations (each pass: a GPU freed since takes them over)."""
    total = {"moved": 0, "kept": 0}
    for drain in Drain.objects.filter(released_at__isnull=True).select_related("gpu__node",
                                                                                 "node"):
        for key, value in drain_reservations_move(drain=drain, now=now).items():
            total[key] += value
    return total
