"""Lending's writes: lend an assigned GPU, return it (on the owner's ask, at the assignment's
end, when the GPU fails, when lending is turned off), record when the scheduler saw it
free, and record a loan that happened in the past (a back-filled month). Every step is
audited; the live ones ask the scheduler backends to reconcile after commit.

Concurrency: a step locks the assignment (lend) or the loan (return) with SELECT ... FOR
UPDATE and re-reads it, so two workers returning one loan return it once; PostgreSQL's
constraints (`loan_gpu_no_overlap`, the loan-inside-assignment triggers) are the last word
and turn a lost race into a `Conflict`.
"""

from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.permissions import is_admin
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.lending.conf import lending_enabled
from gpuquota.lending.selectors import failed_gpu_ids, lending_off_for
from gpuquota.lending.told import loan_lent_tell, loan_returned_tell
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.schedulers.services import schedulers_reconcile_request

E = Loan.EndReason
SECOND = timedelta(seconds=1)


def _now(at: datetime | None) -> datetime:
    return whole_second(at or timezone.now())


def _rollups_follow(*, gpu_id: int, since: datetime) -> None:
    """A loan changes who owns the GPU's busy seconds from `since` (borrowed, not the
    reserving team's): the hours from there to now are recomputed. Later hours are
    computed with the loan when they come."""
    gpu_interval_mark_dirty(gpu_ids=[gpu_id], start=since,
                            end=max(timezone.now(), since + SECOND))


def loan_lend(*, assignment: Assignment, actor=None, reason: str = "",
              at: datetime | None = None) -> Loan:
    """Lend the assignment's GPU from `at` (default now): refused unless the reservation is
    active, allows lending, the assignment is in force, the GPU is healthy and not lent."""
    at = _now(at)
    with transaction.atomic():
        assignment = (Assignment.objects.select_for_update()
                      .select_related("reservation__team", "gpu").get(pk=assignment.pk))
        reservation = assignment.reservation
        _check_lendable(assignment, at)
        loan = Loan(assignment=assignment, gpu=assignment.gpu, lent_from=at,
                    lent_by=actor if actor is not None and actor.is_authenticated else None,
                    lend_reason=reason[:256])
        try:
            with transaction.atomic():
                loan.save()
        except IntegrityError as exc:
            raise Conflict("This GPU is already lent.", field="gpu") from exc
        audit_record(actor=actor, action="loan.lend", obj=loan, team=reservation.team,
                     changes={"gpu": assignment.gpu.uuid, "reservation": reservation.pk,
                              "lent_from": at.isoformat()},
                     reason=reason or "idle for the lending window")
        _rollups_follow(gpu_id=loan.gpu_id, since=at)
        loan_lent_tell(loan)
        schedulers_reconcile_request(reason=f"loan {loan.pk} lent")
    return loan


def _utc(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record_check(assignment: Assignment, lent_from: datetime, returned_at: datetime,
                  now: datetime) -> None:
    """A past loan fits where the live one would have: inside the assignment's charged
    time of a reservation that ran, on a whole GPU neither failed nor lent then."""
    reservation = assignment.reservation
    if reservation.status not in (Reservation.Status.ACTIVE, Reservation.Status.ENDED):
        raise DomainError("Only the GPUs of a reservation that ran (active or ended) can have "
                          "been lent.", field="reservation")
    if returned_at <= lent_from:
        raise DomainError("The return must be after the loan began.", field="returned_at")
    if returned_at > now:
        raise DomainError("A recorded loan has ended: its return is in the past (lend now "
                          "for a loan that goes on).", field="returned_at")
    charged_from = max(assignment.assigned_from, reservation.start,
                       reservation.approved_at or reservation.start)
    if lent_from < charged_from:
        raise DomainError(f"The GPU was not the reservation's before {_utc(charged_from)}.",
                          field="lent_from")
    if returned_at > assignment.assigned_until:
        raise DomainError(f"The GPU was the reservation's until "
                          f"{_utc(assignment.assigned_until)}.", field="returned_at")
    if assignment.gpu.parent_id is not None:
        raise DomainError("A MIG device is lent with its GPU, never alone.", field="gpu")
    if GpuHealthInterval.objects.filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=lent_from), gpu_id=assignment.gpu_id,
            state=GpuHealthInterval.State.FAILED, valid_from__lt=returned_at).exists():
        raise Conflict("The GPU was failed in that window, and failed GPUs are never lent: "
                       "record the loan up to the failure.", field="gpu")
    if Loan.objects.filter(Q(returned_at__isnull=True) | Q(returned_at__gt=lent_from),
                           gpu_id=assignment.gpu_id, lent_from__lt=returned_at).exists():
        raise Conflict("This GPU is already lent in that window.", field="gpu")


def loan_record(*, assignment: Assignment, lent_from: datetime, returned_at: datetime,
                end_reason: str = E.ASSIGNMENT_END, actor=None, reason: str = "",
                freed_at: datetime | None = None, now: datetime | None = None) -> Loan:
    """Record a loan that happened, [lent_from, returned_at) in the past (a back-filled month,
    as samples are back-filled): admins or the system; refused where a live loan could not
    have been. Audited; the hours it covers are recomputed; no scheduler is asked anything."""
    if actor is not None and not is_admin(actor):
        raise PermissionDenied("Only admins record past loans.", field="lent_from")
    if end_reason not in E.values:
        raise DomainError(f"One of {', '.join(E.values)}.", field="end_reason")
    lent_from, returned_at, now = whole_second(lent_from), whole_second(returned_at), _now(now)
    with transaction.atomic():
        assignment = (Assignment.objects.select_for_update()
                      .select_related("reservation__team", "gpu").get(pk=assignment.pk))
        _record_check(assignment, lent_from, returned_at, now)
        if freed_at is not None and whole_second(freed_at) < returned_at:
            raise DomainError("The GPU was freed at or after its return.", field="freed_at")
        loan = Loan(assignment=assignment, gpu_id=assignment.gpu_id, lent_from=lent_from,
                    returned_at=returned_at, end_reason=end_reason,
                    freed_at=freed_at and whole_second(freed_at),
                    lent_by=actor if actor is not None and actor.is_authenticated else None,
                    lend_reason=reason[:256])
        try:
            with transaction.atomic():
                loan.save()
        except IntegrityError as exc:
            raise Conflict("This GPU is already lent in that window.", field="gpu") from exc
        audit_record(actor=actor, action="loan.record", obj=loan,
                     team=assignment.reservation.team,
                     changes={"gpu": assignment.gpu.uuid,
                              "reservation": assignment.reservation_id,
                              "lent_from": lent_from.isoformat(),
                              "returned_at": returned_at.isoformat(), "end_reason": end_reason},
                     reason=reason or "a past loan recorded")
        gpu_interval_mark_dirty(gpu_ids=[loan.gpu_id], start=lent_from, end=returned_at)
    return loan


def _check_lendable(assignment: Assignment, at: datetime) -> None:
    reservation = assignment.reservation
    if not lending_enabled():
        raise Conflict("Lending is switched off on this site (LENDING_ENABLED).",
                       field="reservation")
    if reservation.status != Reservation.Status.ACTIVE:
        raise DomainError("Only an active reservation's GPUs can be lent.", field="reservation")
    if not assignment.assigned_from <= at < assignment.assigned_until:
        raise DomainError("This GPU is not assigned to the reservation now.", field="gpu")
    if assignment.gpu.parent_id is not None:
        raise DomainError("A MIG device is lent with its GPU, never alone.", field="gpu")
    optout = lending_off_for(reservation=reservation)
    if optout is not None:
        raise Conflict(f"Lending is off for this reservation: {optout.reason}",
                       field="reservation")
    if failed_gpu_ids(gpu_ids=[assignment.gpu_id], at=at):
        raise Conflict("This GPU has failed or is drained: failed and drained GPUs are never "
                       "lent.", field="gpu")
    if Loan.objects.filter(gpu_id=assignment.gpu_id, returned_at__isnull=True).exists():
        raise Conflict("This GPU is already lent.", field="gpu")


def loan_return(*, loan: Loan, reason: str, actor=None, at: datetime | None = None,
                note: str = "") -> Loan:
    """End the loan at `at` (default now; never before a second after it began, never after
    its assignment's end). Returning a returned loan changes nothing: a worker killed
    mid-return and retried returns it once."""
    if reason not in E.values:
        raise DomainError(f"One of {', '.join(E.values)}.", field="reason")
    at = _now(at)
    with transaction.atomic():
        loan = (Loan.objects.select_for_update()
                .select_related("assignment__reservation__team", "gpu").get(pk=loan.pk))
        if loan.returned_at is not None:
            return loan
        loan.returned_at = min(max(at, loan.lent_from + SECOND), loan.assignment.assigned_until)
        loan.end_reason = reason
        loan.returned_by = actor if actor is not None and actor.is_authenticated else None
        loan.save(update_fields=["returned_at", "end_reason", "returned_by"])
        audit_record(actor=actor, action="loan.return", obj=loan,
                     team=loan.assignment.reservation.team,
                     changes={"gpu": loan.gpu.uuid, "returned_at": loan.returned_at.isoformat(),
                              "end_reason": reason}, reason=note or E(reason).label)
        _rollups_follow(gpu_id=loan.gpu_id, since=loan.returned_at)
        loan_returned_tell(loan)
        schedulers_reconcile_request(reason=f"loan {loan.pk} returned")
    return loan


def loan_return_observed(*, loan: Loan, freed_at: datetime) -> Loan:
    """Record when the scheduler backend (or, with none, the samples) saw the returned GPU
    free of borrowers; the first observation stands. Never earlier than the return."""
    with transaction.atomic():
        loan = (Loan.objects.select_for_update()
                .select_related("assignment__reservation__team", "gpu").get(pk=loan.pk))
        if loan.returned_at is None:
            raise Conflict("This loan has not been returned.", field="loan")
        if loan.freed_at is not None:
            return loan
        loan.freed_at = max(whole_second(freed_at), loan.returned_at)
        loan.save(update_fields=["freed_at"])
        ttr_s = int((loan.freed_at - loan.returned_at).total_seconds())
        audit_record(actor=None, action="loan.freed", obj=loan,
                     team=loan.assignment.reservation.team,
                     changes={"gpu": loan.gpu.uuid, "freed_at": loan.freed_at.isoformat(),
                              "time_to_return_s": ttr_s})
    return loan


def loan_owner_job_seen(*, loan: Loan, job_id: str, asked_at: datetime,
                        freed_at: datetime) -> Loan:
    """A scheduler backend saw a job of the reserving team (`job_id`) holding the lent GPU:
    the owner took it back. The loan returns as `owner_job` when the job was submitted
    (`asked_at`) and its GPU was free of borrowers when the job started (`freed_at`), so
    the time-to-return is the owner's wait, as the scheduler says. Idempotent."""
    with transaction.atomic():
        loan = loan_return(loan=loan, reason=E.OWNER_JOB, at=asked_at,
                           note=f"job {job_id} of the reserving team holds the GPU")
        if loan.end_reason == E.OWNER_JOB:
            loan = loan_return_observed(loan=loan, freed_at=freed_at)
    return loan


def loans_return_for_reservation(*, reservation: Reservation, reason: str, actor=None,
                                 gpu_ids: list[int] | None = None, at: datetime | None = None,
                                 note: str = "") -> list[Loan]:
    """Return the reservation's open loans (of `gpu_ids` only, when given): a lead's
    "return now", the API, or a job of the reserving team seen by a scheduler backend
    (`owner_job`, `note` naming the job). Returns the loans this call ended."""
    loans = Loan.objects.filter(assignment__reservation=reservation, returned_at__isnull=True)
    if gpu_ids is not None:
        loans = loans.filter(gpu_id__in=gpu_ids)
    return [loan_return(loan=loan, reason=reason, actor=actor, at=at, note=note)
            for loan in loans.order_by("pk")]


def reservation_lend_now(*, reservation: Reservation, actor, gpu_uuid: str | None = None,
                         reason: str = "", at: datetime | None = None) -> Loan:
    """A lead's or admin's "lend now": lend the reservation's GPU `gpu_uuid`, or the first
    of its GPUs in force and not lent."""
    at = _now(at)
    assignments = reservation.assignments.filter(
        assigned_from__lte=at, assigned_until__gt=at).select_related("gpu").order_by("gpu_id")
    if gpu_uuid:
        assignment = assignments.filter(gpu__uuid=gpu_uuid).first()
        if assignment is None:
            raise DomainError("Not a GPU of this reservation now.", field="gpu")
    else:
        lent = Loan.objects.filter(returned_at__isnull=True).values("gpu_id")
        assignment = assignments.exclude(gpu_id__in=lent).first()
        if assignment is None:
            raise Conflict("No GPU of this reservation is free to lend now.", field="gpu")
    return loan_lend(assignment=assignment, actor=actor, at=at,
                     reason=reason or "lent now by hand")


def loan_return_by(*, loan: Loan, actor, is_owner_lead: bool, note: str = "") -> Loan:
    """"Return now" from a page or the API: the reserving team's ask (`owner_ask`) from one of
    its leads, an admin's return (`admin`) otherwise."""
    reason = E.OWNER_ASK if is_owner_lead else E.ADMIN
    return loan_return(loan=loan, reason=reason, actor=actor, note=note)


def loans_end_with_assignment(*, assignment: Assignment, at: datetime) -> None:
    """The reservations' services end the assignment at `at` (a release, a shrink, a swap,
    reclaim): its loans end there too, before PostgreSQL would refuse the move. An open
    loan returns at `at` (`assignment_end`); a return asked later is brought back to `at`;
    a loan that began at or after `at` lies outside the assignment left and is removed.
    Each change is audited."""
    loans = Loan.objects.select_for_update().filter(
        Q(returned_at__isnull=True) | Q(returned_at__gt=at), assignment=assignment)
    team = assignment.reservation.team
    for loan in loans.select_related("gpu"):
        if loan.lent_from >= at:
            audit_record(actor=None, action="loan.void", obj=loan, team=team,
                         changes={"gpu": loan.gpu.uuid, "lent_from": loan.lent_from.isoformat(),
                                  "assignment_until": at.isoformat()},
                         reason="the assignment ended before the loan began")
            loan.delete()
            _rollups_follow(gpu_id=loan.gpu_id, since=loan.lent_from)
        elif loan.returned_at is None:
            loan_return(loan=loan, reason=E.ASSIGNMENT_END, at=at,
                        note="the assignment ended")
        else:
            audit_record(actor=None, action="loan.cut", obj=loan, team=team,
                         changes={"returned_at": [loan.returned_at.isoformat(), at.isoformat()],
                                  "end_reason": [loan.end_reason, E.ASSIGNMENT_END]},
                         reason="the assignment ended before the return")
            loan.returned_at, loan.end_reason = at, E.ASSIGNMENT_END
            loan.save(update_fields=["returned_at", "end_reason"])
            _rollups_follow(gpu_id=loan.gpu_id, since=at)
    schedulers_reconcile_request(reason=f"assignment {assignment.pk} ended")
