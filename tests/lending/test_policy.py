"""The lending policy on a frozen clock: idle GPUs are lent after LEND_AFTER_IDLE_S, never a
busy, owner-used, unreported or failed one; loans return on the owner's ask, the owner's
process, the assignment's end, the GPU's failure and an opt-out; the samples say when a
returned GPU is free; every step is audited."""

from datetime import timedelta

import pytest
import time_machine

from gpuquota.core.errors import Conflict
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.lending.optouts import optout_create, optout_end
from gpuquota.lending.scan import lending_scan
from gpuquota.lending.selectors import (
    loans_active_for_cluster,
    nearest_rank,
    team_loans,
    time_to_return,
)
from gpuquota.lending.services import loan_lend, loan_return, loan_return_observed
from gpuquota.reservations.models import Loan
from tests.lending.factories import (
    BORROWER_USER,
    IDLE,
    MIN,
    NOW,
    OWNER_USER,
    STRANGER,
    World,
    held_gpus,
    samples,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
E = Loan.EndReason


@pytest.fixture
def world(settings):
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    settings.LENDING_ENABLED = True
    return World.create()


def _idle(gpu, start=NOW - IDLE, end=NOW, **kwargs):
    samples(gpu, start=start, end=end, util=0, **kwargs)


def test_only_a_gpu_idle_for_the_whole_window_is_lent(world):
    reservation = world.reserve(count=4)
    idle, busy_once, owner_proc, unreported = held_gpus(reservation)
    _idle(idle)
    _idle(busy_once, end=NOW - 2 * MIN)
    samples(busy_once, start=NOW - 2 * MIN, end=NOW - MIN, util=40)
    _idle(busy_once, start=NOW - MIN)
    _idle(owner_proc, users=(OWNER_USER,))  # a notebook kernel of the team, 0 %
    _idle(unreported, start=NOW - 10 * MIN)  # most of the window unknown

    assert lending_scan(now=NOW - 5 * MIN) == {"returned": 0, "freed": 0, "lent": 0}
    assert lending_scan(now=NOW)["lent"] == 1
    [loan] = Loan.objects.all()
    assert (loan.gpu, loan.lent_from, loan.lent_by, loan.returned_at) == (idle, NOW, None, None)
    entry = AuditEntry.objects.get(action="loan.lend")
    assert (entry.team, entry.actor, entry.object_id) == (world.team, None, str(loan.pk))
    assert lending_scan(now=NOW)["lent"] == 0  # twice changes nothing


def test_a_gpu_is_idle_for_lending_only_over_its_own_assignment(world):
    reservation = world.reserve(count=1, start=NOW - IDLE + MIN)  # began 29 min ago
    [gpu] = held_gpus(reservation)
    _idle(gpu, users=(STRANGER,))
    assert lending_scan(now=NOW)["lent"] == 0  # the assignment is younger than the window
    _idle(gpu, start=NOW, end=NOW + MIN, users=(STRANGER,))
    assert lending_scan(now=NOW + MIN)["lent"] == 1


def test_a_lead_returns_a_gpu_now_and_the_samples_say_when_it_is_free(world):
    reservation = world.reserve(count=1)
    [gpu] = held_gpus(reservation)
    _idle(gpu)
    lending_scan(now=NOW)
    loan = Loan.objects.get()
    samples(gpu, start=NOW, end=NOW + 10 * MIN, util=95, users=(BORROWER_USER,))
    assert team_loans(team=world.other_team, now=NOW + 10 * MIN).borrowed == [loan]
    assert team_loans(team=world.team, now=NOW + 10 * MIN).lent == [loan]

    with time_machine.travel(NOW + 10 * MIN, tick=False):
        loan_return(loan=loan, reason=E.OWNER_ASK, actor=world.lead)
    loan.refresh_from_db()
    assert (loan.returned_at, loan.end_reason, loan.returned_by) == (
        NOW + 10 * MIN, E.OWNER_ASK, world.lead)
    # The borrower runs on for 3 min 20 s of notice (two 100 s windows), then is gone.
    samples(gpu, start=NOW + 10 * MIN, end=NOW + 13 * MIN + 20 * timedelta(seconds=1),
            util=95, users=(BORROWER_USER,), window_s=100)
    assert lending_scan(now=NOW + 14 * MIN)["freed"] == 0  # no sample without them yet
    samples(gpu, start=NOW + 13 * MIN + timedelta(seconds=20), end=NOW + 15 * MIN, util=0,
            window_s=100)
    assert lending_scan(now=NOW + 15 * MIN)["freed"] == 1
    loan.refresh_from_db()
    assert loan.freed_at == NOW + 13 * MIN + timedelta(seconds=20)
    assert time_to_return(start=NOW, end=NOW + 1 * IDLE).p99_s == 200
    assert [a.action for a in AuditEntry.objects.filter(action__startswith="loan.")
            .order_by("id")] == [
        "loan.lend", "loan.return", "loan.freed"]
    # Returned to its owner, the GPU waits a whole idle window before it is lent again.
    _idle(gpu, start=NOW + 15 * MIN, end=NOW + 45 * MIN)
    assert lending_scan(now=NOW + 40 * MIN)["lent"] == 0
    assert lending_scan(now=NOW + 45 * MIN)["lent"] == 1


def test_the_owners_process_on_a_lent_gpu_ends_the_loan(world):
    [gpu] = held_gpus(world.reserve(count=1))
    _idle(gpu)
    lending_scan(now=NOW)
    samples(gpu, start=NOW, end=NOW + 2 * MIN, util=90, users=(BORROWER_USER,))
    assert lending_scan(now=NOW + 2 * MIN)["returned"] == 0
    samples(gpu, start=NOW + 2 * MIN, end=NOW + 3 * MIN, util=90,
            users=(BORROWER_USER, OWNER_USER))
    assert lending_scan(now=NOW + 3 * MIN)["returned"] == 1
    loan = Loan.objects.get()
    assert (loan.end_reason, loan.returned_at) == (E.OWNER_JOB, NOW + 3 * MIN)
    samples(gpu, start=NOW + 3 * MIN, end=NOW + 4 * MIN, util=90, users=(OWNER_USER,))
    lending_scan(now=NOW + 4 * MIN)
    loan.refresh_from_db()
    assert loan.freed_at == NOW + 3 * MIN  # the owner alone from the first sample after


def test_loans_end_with_the_assignment_and_when_the_gpu_fails(world):
    short = world.reserve(count=1, end=NOW + 10 * MIN)
    long = world.reserve(count=1)
    [ends], [fails] = held_gpus(short), held_gpus(long)
    _idle(ends), _idle(fails)
    assert lending_scan(now=NOW)["lent"] == 2
    GpuHealthInterval.objects.create(gpu=fails, state="failed", valid_from=NOW + 5 * MIN,
                                     reason="xid 79")
    assert lending_scan(now=NOW + 20 * MIN)["returned"] == 2
    by_gpu = {loan.gpu: loan for loan in Loan.objects.all()}
    assert (by_gpu[ends].end_reason, by_gpu[ends].returned_at) == (E.ASSIGNMENT_END,
                                                                   NOW + 10 * MIN)
    assert (by_gpu[fails].end_reason, by_gpu[fails].returned_at) == (E.GPU_FAILED,
                                                                     NOW + 5 * MIN)
    _idle(fails, start=NOW, end=NOW + 2 * IDLE)
    assert lending_scan(now=NOW + 2 * IDLE)["lent"] == 0  # failed GPUs are never lent
    with pytest.raises(Conflict, match="failed"):
        loan_lend(assignment=long.assignments.get(), actor=world.lead, at=NOW + 2 * IDLE)


def test_opt_outs_return_the_loans_and_keep_gpus_from_being_lent(world, settings):
    reservation, other = world.reserve(count=1), world.reserve(count=1)
    for gpu in (*held_gpus(reservation), *held_gpus(other)):
        _idle(gpu, end=NOW + 2 * IDLE)
    assert lending_scan(now=NOW)["lent"] == 2
    with time_machine.travel(NOW + MIN, tick=False):
        optout = optout_create(actor=world.lead, reservation=reservation, reason="benchmark")
    loan = Loan.objects.get(assignment__reservation=reservation)
    assert (loan.end_reason, loan.returned_at, loan.returned_by) == (E.LENDING_OFF,
                                                                     NOW + MIN, world.lead)
    assert lending_scan(now=NOW + 2 * IDLE)["lent"] == 0
    with pytest.raises(Conflict, match="already off"):
        optout_create(actor=world.lead, reservation=reservation, reason="again")
    with time_machine.travel(NOW + 2 * IDLE, tick=False):
        optout_end(optout=optout, actor=world.admin)
        class_wide = optout_create(actor=world.admin, team=world.team,
                                   gpu_class=world.gpu_class, reason="interactive week")
    assert not Loan.objects.filter(returned_at__isnull=True).exists()
    assert lending_scan(now=NOW + 2 * IDLE)["lent"] == 0
    optout_end(optout=class_wide, actor=world.lead)
    assert lending_scan(now=NOW + 2 * IDLE)["lent"] == 1
    settings.LENDING_ENABLED = False
    assert lending_scan(now=NOW + 2 * IDLE + MIN) == {"returned": 1, "freed": 0, "lent": 0}
    with pytest.raises(Conflict, match="switched off"):
        loan_lend(assignment=reservation.assignments.get(), actor=world.admin,
                  at=NOW + 2 * IDLE + 2 * MIN)
    assert set(AuditEntry.objects.filter(action__startswith="lending.").values_list(
        "action", flat=True)) == {"lending.optout", "lending.optout_end"}


def test_lend_now_and_the_cluster_view_of_the_backends(world):
    reservation = world.reserve(count=2)
    first, second = reservation.assignments.order_by("gpu_id")
    loan = loan_lend(assignment=first, actor=world.lead, reason="demo", at=NOW)
    assert loan.lent_by == world.lead
    with pytest.raises(Conflict, match="already lent"):
        loan_lend(assignment=first, actor=world.lead, at=NOW + MIN)
    loan_return(loan=loan, reason=E.ADMIN, actor=world.admin, at=NOW + 5 * MIN)
    assert loan_return(loan=loan, reason=E.OWNER_ASK, at=NOW + 9 * MIN).end_reason == E.ADMIN
    loan_lend(assignment=second, at=NOW + 2 * MIN)
    assert [x.gpu_id for x in loans_active_for_cluster(cluster=world.cluster,
                                                       at=NOW + 3 * MIN)] == [
        second.gpu_id, first.gpu_id]
    assert [x.gpu_id for x in loans_active_for_cluster(cluster=world.cluster,
                                                       at=NOW + 5 * MIN)] == [second.gpu_id]
    loan_return_observed(loan=loan, freed_at=NOW + 4 * MIN)  # never before the return
    loan.refresh_from_db()
    assert loan.freed_at == NOW + 5 * MIN


def test_time_to_return_quantiles_are_nearest_rank():
    values = list(range(1, 101))
    assert [nearest_rank(values, q) for q in (50, 95, 99)] == [50, 95, 99]
    assert [nearest_rank([7, 300, 12], q) for q in (50, 95, 99)] == [12, 300, 300]
    assert nearest_rank([], 50) is None


def test_ending_an_assignment_early_ends_its_loans(world):
    """A release (or reclaim, a shrink, a swap) moves the assignment's end earlier: its
    loans end there, instead of PostgreSQL refusing the release."""
    from gpuquota.reservations.services import reservation_release

    reservation = world.reserve(count=3)
    open_, returned_late, lent_later = reservation.assignments.order_by("gpu_id")
    open_loan = loan_lend(assignment=open_, at=NOW - 60 * MIN)
    late = loan_return(loan=loan_lend(assignment=returned_late, at=NOW - 60 * MIN),
                       reason=E.OWNER_ASK, at=NOW + 5 * MIN)
    loan_lend(assignment=lent_later, at=NOW + MIN)
    reservation_release(reservation=reservation, actor=world.lead, now=NOW)
    open_loan.refresh_from_db(), late.refresh_from_db()
    assert (open_loan.returned_at, open_loan.end_reason) == (NOW, E.ASSIGNMENT_END)
    assert (late.returned_at, late.end_reason) == (NOW, E.ASSIGNMENT_END)
    assert not Loan.objects.filter(assignment=lent_later).exists()
    assert set(AuditEntry.objects.filter(action__in=["loan.cut", "loan.void"]).values_list(
        "action", flat=True)) == {"loan.cut", "loan.void"}
