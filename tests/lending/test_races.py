"""Under concurrency the database has the last word: two returns of one loan return it
once, two lends of one GPU lend it once (raw threads, each with its own connection)."""

import pytest

from gpuquota.core.errors import Conflict
from gpuquota.core.models import AuditEntry
from gpuquota.lending.services import loan_lend, loan_return
from gpuquota.reservations.models import Loan
from tests.helpers import run_concurrently
from tests.lending.factories import MIN, NOW, World

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def assignment(transactional_db):
    world = World.create(gpus=1)
    return world.reserve(count=1).assignments.get()


def test_two_returns_of_one_loan_return_it_once(assignment):
    loan = loan_lend(assignment=assignment, at=NOW)
    outcomes = run_concurrently([
        lambda: loan_return(loan=loan, reason="owner_ask", at=NOW + 5 * MIN),
        lambda: loan_return(loan=loan, reason="admin", at=NOW + 6 * MIN),
    ])
    assert not [o for o in outcomes if isinstance(o, Exception)]
    loan.refresh_from_db()
    assert {(o.returned_at, o.end_reason) for o in outcomes} == {(loan.returned_at,
                                                                  loan.end_reason)}
    assert AuditEntry.objects.filter(action="loan.return").count() == 1


def test_two_lends_of_one_gpu_lend_it_once(assignment):
    outcomes = run_concurrently([lambda: loan_lend(assignment=assignment, at=NOW)] * 2)
    assert sorted(type(o).__name__ for o in outcomes) == ["Conflict", "Loan"]
    assert [o for o in outcomes if isinstance(o, Conflict)][0].field == "gpu"
    assert Loan.objects.count() == 1
    assert AuditEntry.objects.filter(action="loan.lend").count() == 1
