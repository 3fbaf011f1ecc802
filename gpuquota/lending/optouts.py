"""Turning lending off (and on again) for a reservation or for a team and class: leads of
the team and admins (the views ask `accounts.permissions`). Turning it off returns the
GPUs lent under it at once."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.lending.models import LendingOptOut
from gpuquota.lending.services import E, loan_return
from gpuquota.reservations.models import Loan, Reservation

S = LendingOptOut.Scope
OPEN_STATUSES = (Reservation.Status.PENDING, Reservation.Status.SCHEDULED,
                 Reservation.Status.ACTIVE)


def optout_create(*, actor, reason: str, team=None, gpu_class=None,
                  reservation: Reservation | None = None) -> LendingOptOut:
    """Turn lending off for `reservation`, or for `team`'s reservations of `gpu_class`;
    the loans it covers are returned now."""
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("Say why lending is turned off.", field="reason")
    if len(reason) > 256:
        raise DomainError("At most 256 characters.", field="reason")
    if reservation is not None:
        if reservation.status not in OPEN_STATUSES:
            raise DomainError("The reservation has ended.", field="reservation")
        optout = LendingOptOut(scope=S.RESERVATION, team=reservation.team,
                               reservation=reservation, reason=reason)
        covered = Loan.objects.filter(assignment__reservation=reservation)
    elif team is not None and gpu_class is not None:
        optout = LendingOptOut(scope=S.TEAM_CLASS, team=team, gpu_class=gpu_class, reason=reason)
        covered = Loan.objects.filter(assignment__reservation__team=team,
                                      assignment__reservation__gpu_class=gpu_class)
    else:
        raise DomainError("Name a reservation, or a team and a GPU class.", field="reservation")
    optout.created_by = actor
    optout.created_at = whole_second(timezone.now())
    with transaction.atomic():
        try:
            with transaction.atomic():
                optout.save()
        except IntegrityError as exc:
            raise Conflict("Lending is already off for this.", field="reservation") from exc
        audit_record(actor=actor, action="lending.optout", obj=optout, team=optout.team,
                     changes={"scope": optout.scope, "reservation": optout.reservation_id,
                              "gpu_class": optout.gpu_class_id}, reason=reason)
        for loan in covered.filter(returned_at__isnull=True):
            loan_return(loan=loan, reason=E.LENDING_OFF, actor=actor, note=reason)
    return optout


def optout_end(*, optout: LendingOptOut, actor) -> LendingOptOut:
    """Turn lending back on: the opt-out ends now (ending an ended one changes nothing)."""
    with transaction.atomic():
        optout = LendingOptOut.objects.select_for_update().get(pk=optout.pk)
        if optout.ended_at is not None:
            return optout
        optout.ended_at = max(whole_second(timezone.now()), optout.created_at)
        optout.ended_by = actor
        optout.save(update_fields=["ended_at", "ended_by"])
        audit_record(actor=actor, action="lending.optout_end", obj=optout, team=optout.team,
                     changes={"scope": optout.scope, "reservation": optout.reservation_id,
                              "gpu_class": optout.gpu_class_id})
    return optout
