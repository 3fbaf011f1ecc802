"""The lending policy's periodic pass (`lending.scan`): end the loans that are due (the
assignment ended, the GPU failed, the reserving team's process appeared, lending turned
off), record when the samples saw returned GPUs free of borrowers,
and lend the GPUs idle for LEND_AFTER_IDLE_S. Safe to run twice: each step re-reads
what it changes under a lock."""

from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from gpuquota.core.errors import DomainError
from gpuquota.core.fields import whole_second
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.lending.conf import lending_enabled
from gpuquota.lending.idle import gpus_idle, owner_processes_seen, seen_free_at
from gpuquota.lending.selectors import (
    lend_candidates,
    lending_off_q,
    loan_candidate,
    loans_list,
    loans_returning,
)
from gpuquota.lending.services import E, loan_lend, loan_return, loan_return_observed
from gpuquota.reliability.held import drained_spans
from gpuquota.reservations.models import Reservation

#: How far back each pass looks for the reserving team's processes on a lent GPU: a pass
#: reads the last hour, not the loan's whole life (passes run every minute or so).
OWNER_LOOKBACK = timedelta(hours=1)


def lending_scan(*, now: datetime | None = None) -> dict:
    """One pass of the policy at `now` (default now); how many loans each step changed."""
    now = whole_second(now or timezone.now())
    counts = {"returned": _return_due(now), "freed": _observe_freed(now), "lent": 0}
    if lending_enabled():
        counts["lent"] = _lend_idle(now)
    return counts


def _return_due(now: datetime) -> int:
    open_loans = loans_list(state="open").filter(lent_from__lt=now)
    returned = 0
    if not lending_enabled():
        for loan in open_loans:
            loan_return(loan=loan, reason=E.LENDING_OFF, at=now, note="LENDING_ENABLED is off")
            returned += 1
        return returned
    ended = open_loans.filter(Q(assignment__assigned_until__lte=now)
                              | ~Q(assignment__reservation__status=Reservation.Status.ACTIVE))
    for loan in ended:
        loan_return(loan=loan, reason=E.ASSIGNMENT_END,
                    at=min(now, loan.assignment.assigned_until))
        returned += 1
    returned += _return_failed(open_loans, now)
    for loan in open_loans.filter(lending_off_q("assignment__reservation__")):
        loan_return(loan=loan, reason=E.LENDING_OFF, at=now, note="lending turned off")
        returned += 1
    loans = list(open_loans)
    seen = owner_processes_seen(
        candidates=[loan_candidate(loan, since=max(loan.lent_from, now - OWNER_LOOKBACK))
                    for loan in loans], now=now)
    for loan in loans:
        if loan.gpu_id in seen:
            loan_return(loan=loan, reason=E.OWNER_JOB, at=now,
                        note="a process of the reserving team ran on the lent GPU")
            returned += 1
    return returned


def _return_failed(open_loans, now: datetime) -> int:
    failures = GpuHealthInterval.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=now),
        gpu_id__in=open_loans.values("gpu_id"), state=GpuHealthInterval.State.FAILED,
        valid_from__lte=now).values_list("gpu_id", "valid_from")
    failed_from = dict(failures)
    # the failed GPU's own drain: a loan on another GPU of a drained node runs on (Slurm's
    # DRAIN lets running jobs finish), it is only not lent again
    for gpu_id, event_at, _ in drained_spans(gpu_ids=open_loans.values_list("gpu_id", flat=True),
                                              start=now, end=now + timedelta(seconds=1),
                                              node_wide=False):
        failed_from[gpu_id] = min(failed_from.get(gpu_id, event_at), event_at)
    returned = 0
    for loan in open_loans.filter(gpu_id__in=failed_from):
        loan_return(loan=loan, reason=E.GPU_FAILED, at=max(failed_from[loan.gpu_id],
                                                             loan.lent_from))
        returned += 1
    return returned


def _observe_freed(now: datetime) -> int:
    freed = 0
    for loan in loans_returning():
        at = seen_free_at(candidate=loan_candidate(loan, since=loan.returned_at), now=now)
        if at is not None:
            loan_return_observed(loan=loan, freed_at=min(at, now))
            freed += 1
    return freed


def _lend_idle(now: datetime) -> int:
    candidates = lend_candidates(now=now)
    idle = gpus_idle(candidates=[c for _, c in candidates], now=now)
    lent = 0
    for assignment, candidate in candidates:
        if candidate.gpu_id not in idle:
            continue
        try:
            loan_lend(assignment=assignment, at=now, reason="idle for the lending window")
        except DomainError:  # changed since it was read (lent, failed, opted out): next pass
            continue
        lent += 1
    return lent


