"""A past loan recorded as it happened (issue 29 §2), so a back-filled month with lending
can be rebuilt: an admin back-fills last month's reservation, records the loan of its GPU
inside it, and the month's statements carry the borrowed time, the lending credit and the
lent hours. Refused wherever a live loan could not have been.

October 10: vision's H100 reserved for the day (2.50 per GPU-hour), lent 10:00-14:00,
speech's job busy on it 11:00-12:00 (borrowed 1.50, credit 2.50 x 0.5 = 1.25).
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.lending.services import loan_lend, loan_record
from gpuquota.reservations.models import Loan, Reservation
from gpuquota.reservations.services import reservation_create
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, GpuClassFactory, RateCardFactory, UserFactory, make_gpu
from tests.reports.test_lending_money import World
from tests.usage.factories import team_with_user

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
DAY = datetime(2026, 10, 10, tzinfo=UTC)
NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def october(time_machine):
    time_machine.move_to(NOW, tick=False)
    world = World.__new__(World)  # its helpers, with a reservation made by the service
    world.gpu_class = GpuClassFactory(name="H100-80GB")
    RateCardFactory(gpu_class=world.gpu_class)
    world.gpu = make_gpu(gpu_class=world.gpu_class)
    world.vision, _ = team_with_user("vision", "alice", world.gpu.node.cluster)
    world.speech, _ = team_with_user("speech", "bob", world.gpu.node.cluster)
    world.pid = 100
    world.admin = AdminFactory()
    reservation = reservation_create(team=world.vision, gpu_class=world.gpu_class, count=1,
                                     start=DAY, end=DAY + 24 * H, requested_by=world.admin)
    assert (reservation.status, reservation.is_backfill) == (Reservation.Status.ENDED, True)
    world.assignment = reservation.assignments.get()
    return world


def test_a_loan_of_an_ended_reservation_could_not_be_recorded_before(october):
    with pytest.raises(DomainError, match="Only an active reservation"):
        loan_lend(assignment=october.assignment, actor=october.admin, at=DAY + 10 * H)


def test_a_recorded_loan_rebuilds_the_months_lending(october):
    loan = loan_record(assignment=october.assignment, lent_from=DAY + 10 * H,
                       returned_at=DAY + 14 * H, end_reason="owner_ask", actor=october.admin,
                       reason="from the old lending spreadsheet")
    assert (loan.lent_from, loan.returned_at, loan.end_reason) == (
        DAY + 10 * H, DAY + 14 * H, "owner_ask")
    entry = AuditEntry.objects.get(action="loan.record")
    assert entry.changes["lent_from"] == "2026-10-10T10:00:00+00:00"
    october.busy(DAY + 11 * H, 60, "bob")  # the borrower's job, back-filled too
    while dirty_hours_process():
        pass
    client = Client()
    client.force_login(october.admin)
    vision = client.get("/api/v1/statements/vision/2026-10").json()
    speech = client.get("/api/v1/statements/speech/2026-10").json()
    assert [(line["kind"], line["seconds"], line["amount"]) for line in vision["lines"]] == [
        ("reserved", 86400, "60.00"), ("lending_credit", 3600, "-1.25")]
    assert (vision["utilization"]["lent_hours"], vision["utilization"]["lent_busy_hours"]) == (
        "4.00", "1.00")
    assert [(line["kind"], line["seconds"], line["amount"]) for line in speech["lines"]] == [
        ("borrowed", 3600, "1.50")]
    assert Decimal(vision["total"]) + Decimal(speech["total"]) == Decimal("60.25")


@pytest.mark.parametrize("lent_from, returned_at, error, field", [
    (DAY - H, DAY + 2 * H, DomainError, "lent_from"),  # before the reservation
    (DAY + 20 * H, DAY + 25 * H, DomainError, "returned_at"),  # after it
    (DAY + 2 * H, DAY + 2 * H, DomainError, "returned_at"),  # empty
    (DAY + 8 * H, DAY + 9 * H, Conflict, "gpu"),  # the GPU failed 08:30-08:45
    (DAY + 3 * H, DAY + 5 * H, Conflict, "gpu"),  # lent already 04:00-06:00
])
def test_a_loan_that_could_not_have_been_is_refused(october, lent_from, returned_at, error,
                                                     field):
    GpuHealthInterval.objects.create(gpu=october.gpu, state="failed",
                                     valid_from=DAY + 8.5 * H, valid_until=DAY + 8.75 * H)
    loan_record(assignment=october.assignment, lent_from=DAY + 4 * H,
                returned_at=DAY + 6 * H, actor=october.admin)
    with pytest.raises(error) as refused:
        loan_record(assignment=october.assignment, lent_from=lent_from,
                    returned_at=returned_at, actor=october.admin)
    assert refused.value.field == field
    assert Loan.objects.count() == 1


def test_only_admins_record_past_loans_and_only_past_ones(october, time_machine):
    with pytest.raises(PermissionDenied):
        loan_record(assignment=october.assignment, lent_from=DAY + H, returned_at=DAY + 2 * H,
                    actor=UserFactory())
    reservation = reservation_create(team=october.vision, gpu_class=october.gpu_class,
                                     count=1, start=NOW - H, end=NOW + H,
                                     requested_by=october.admin)
    with pytest.raises(DomainError) as refused:  # a loan going on is lent, not recorded
        loan_record(assignment=reservation.assignments.get(), lent_from=NOW - H,
                    returned_at=NOW + H / 2)
    assert refused.value.field == "returned_at"
    reservation.status = Reservation.Status.CANCELLED
    reservation.save(update_fields=["status"])
    with pytest.raises(DomainError) as refused:
        loan_record(assignment=reservation.assignments.get(), lent_from=NOW - H,
                    returned_at=NOW - H / 2)
    assert refused.value.field == "reservation"
    assert Loan.objects.count() == 0
