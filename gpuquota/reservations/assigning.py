"""Choosing and writing assignments, with the database as the final guard.

Quota checks of one team and class are serialised by a transaction-scoped lock
(PostgreSQL advisory lock; SQLite transactions are IMMEDIATE, hence serial).
Races between teams for the same GPU end at the exclusion constraint
`assignment_no_double_booking`: the losing insert fails, we look again at what
is free (READ COMMITTED sees the winner's rows) and pick other GPUs, or refuse.
"""

import logging
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from gpuquota.core.errors import Conflict
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.capacity import (
    free_map,
    gpus_by_node,
    next_free_at,
    placement_pick,
)
from gpuquota.reservations.models import Assignment, Reservation

# Each failed insert means a concurrent transaction committed a GPU of this window, so
# retries are bounded by the free GPUs; the cap only guards against pathologies.
ASSIGN_ATTEMPTS = 64
logger = logging.getLogger(__name__)


class NoCapacity(Conflict):
    code = "no_capacity"

    def __init__(self, message: str, *, field: str | None = None, free_gpus: int = 0,
                 next_free: datetime | None = None):
        super().__init__(message, field=field)
        self.free_gpus = free_gpus
        self.next_free = next_free


class OverQuota(Conflict):
    code = "over_quota"


def lock_team_class(*, team_id: int, gpu_class_id: int) -> None:
    """Serialise quota decisions of one team and class until the transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [team_id, gpu_class_id])


def lock_class_guarantees(*, gpu_class_id: int, team_id: int) -> None:
    """Before deciding an over-quota approval: hold the lock of every team with a
    quota in the class (and the requester's), in one order, so that no other quota
    decision of the class runs meanwhile and guarantees are read as they stand."""
    from gpuquota.reservations.models import Quota

    team_ids = set(Quota.objects.filter(gpu_class_id=gpu_class_id).values_list("team_id",
                                                                               flat=True))
    for locked_team_id in sorted(team_ids | {team_id}):
        lock_team_class(team_id=locked_team_id, gpu_class_id=gpu_class_id)


def local_text(at: datetime) -> str:
    """An instant in the active (user's) time zone, for messages."""
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M %Z")


def no_capacity_error(
    *, gpu_class: GpuClass, start: datetime, end: datetime, count: int, free_gpus: int,
    same_node: bool = False,
) -> NoCapacity:
    """A refusal that says how many GPUs are free (on one node, for `same_node`) and
    when enough next are."""
    nxt = next_free_at(gpu_class=gpu_class, start=start, end=end, count=count,
                       same_node=same_node)
    where = " on one node" if same_node else ""
    message = (
        f"No capacity: {free_gpus} {gpu_class.name} GPU(s) free{where} for "
        f"{local_text(start)} – {local_text(end)}, {count} asked."
    )
    if nxt is not None and nxt > start:
        message += f" {count} are free for the same duration from {local_text(nxt)}."
    elif nxt is None:
        message += f" Not {count} free for that duration within 90 days."
    return NoCapacity(message, field="count", free_gpus=free_gpus, next_free=nxt)


def _pick(reservation: Reservation, start: datetime, end: datetime, count: int,
          exclude_gpu_ids: set[int]) -> tuple[list[Gpu] | None, int]:
    fmap = free_map(gpu_class=reservation.gpu_class, start=start, end=end)
    candidates = [g for g in fmap.gpus_free_over(start, end) if g.id not in exclude_gpu_ids]
    same_node = reservation.placement == Reservation.Placement.SAME_NODE
    picked = placement_pick(gpus=candidates, count=count, same_node=same_node)
    if same_node:
        return picked, max(map(len, gpus_by_node(candidates).values()), default=0)
    return picked, len(candidates)


def assignments_create(
    *, reservation: Reservation, start: datetime, end: datetime, count: int,
    exclude_gpu_ids: set[int] | None = None,
) -> list[Assignment]:
    """Assign `count` free GPUs of the reservation's class over [start, end), or raise
    NoCapacity. Must run inside the caller's transaction."""
    exclude = set(exclude_gpu_ids or ())
    for _attempt in range(ASSIGN_ATTEMPTS):
        picked, free_gpus = _pick(reservation, start, end, count, exclude)
        if picked is None:
            raise no_capacity_error(
                gpu_class=reservation.gpu_class, start=start, end=end, count=count,
                free_gpus=free_gpus,
                same_node=reservation.placement == Reservation.Placement.SAME_NODE,
            )
        try:
            with transaction.atomic():
                return Assignment.objects.bulk_create(
                    [
                        Assignment(reservation=reservation, gpu=gpu, assigned_from=start,
                                   assigned_until=end)
                        for gpu in sorted(picked, key=lambda g: g.id)  # one lock order
                    ]
                )
        except IntegrityError:
            # another transaction won one of these GPUs: look again
            logger.info("assignment race lost for reservation %s; retrying", reservation.pk)
    raise NoCapacity(
        f"No capacity: {reservation.gpu_class.name} GPUs were taken by concurrent requests; "
        "try again.",
        field="count",
    )
