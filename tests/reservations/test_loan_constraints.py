"""A GPU is never lent twice at once, and only inside its own assignment: PostgreSQL says so
by itself (constraints and triggers), tested here with raw SQL, whatever the services do."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from gpuquota.reservations.models import Assignment, Loan, Reservation
from tests.factories import TeamFactory, UserFactory, make_gpu

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
T0 = datetime(2026, 11, 2, 8, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def assignment():
    gpu = make_gpu()
    reservation = Reservation.objects.create(
        team=TeamFactory(), gpu_class=gpu.gpu_class, count=1, start=T0, end=T0 + 10 * H,
        status="active", requested_by=UserFactory(), requested_at=T0,
    )
    return Assignment.objects.create(
        reservation=reservation, gpu=gpu, assigned_from=T0, assigned_until=T0 + 10 * H)


def _insert_loan(assignment, gpu_id, lent_from, returned_at=None, end_reason=""):
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Loan._meta.db_table} (assignment_id, gpu_id, lent_from, returned_at,"
            " end_reason, lend_reason, created_at) VALUES (%s, %s, %s, %s, %s, '', now())",
            [assignment.id, gpu_id, lent_from, returned_at, end_reason],
        )


def _refused(fn, *args, **kwargs) -> bool:
    try:
        with transaction.atomic():
            fn(*args, **kwargs)
    except IntegrityError:
        return True
    return False


def test_a_gpu_is_never_lent_twice_at_once(assignment):
    _insert_loan(assignment, assignment.gpu_id, T0 + H, T0 + 3 * H, "owner_ask")
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + 2 * H)
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0, T0 + H + timedelta(seconds=1),
                    "owner_ask")
    _insert_loan(assignment, assignment.gpu_id, T0 + 3 * H)  # back to back is fine
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + 5 * H)  # open overlaps


def test_a_loan_lies_inside_its_own_assignment_on_its_gpu(assignment):
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 - timedelta(seconds=1))
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + 10 * H)
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + H,
                    T0 + 10 * H + timedelta(seconds=1), "assignment_end")
    other = make_gpu()
    assert _refused(_insert_loan, assignment, other.id, T0 + H)
    _insert_loan(assignment, assignment.gpu_id, T0 + 9 * H, T0 + 10 * H, "assignment_end")


def test_an_assignment_cannot_move_away_from_its_loans(assignment):
    _insert_loan(assignment, assignment.gpu_id, T0 + 2 * H, T0 + 4 * H, "owner_ask")
    table = Assignment._meta.db_table

    def _set(sql, params):
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {sql} WHERE id = %s", [*params, assignment.id])

    assert _refused(_set, "assigned_until = %s", [T0 + 3 * H])
    assert _refused(_set, "assigned_from = %s", [T0 + 3 * H])
    _set("assigned_until = %s", [T0 + 4 * H])  # the loan ends with it: allowed


def test_statuses_and_times_are_checked(assignment):
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + H, T0 + H, "owner_ask")
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + H, T0 + 2 * H, "")
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + H, None, "owner_ask")
    assert _refused(_insert_loan, assignment, assignment.gpu_id, T0 + H, T0 + 2 * H, "bogus")
