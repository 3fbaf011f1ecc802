"""`manage.py statements`: draft and summary, approve (as an admin or the system), send."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from reports.models import Statement
from tests.reports.factories import OCT_3, SETTLED, h100, reserved_hours

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("statements", *args, stdout=out, stderr=out)
    return out.getvalue()


@pytest.fixture
def month(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    reserved_hours(roles.team, h100(), OCT_3, 10)
    return roles


def test_draft_prints_a_summary_table(month):
    out = run("--month", "2026-10")
    assert out.splitlines() == [
        "Statements for 2026-10:",
        "team    status  currency  total  lines  reserved h  note",
        "Vision  draft   USD       25.00      1       10.00",
    ]


def test_approve_as_an_admin_then_send(month, smtp_server):
    out = run("--month", "2026-10", "--approve", "--as", "admin", "--send")
    assert "approved 1 statement(s)" in out and "Vision: sent" in out
    statement = Statement.objects.get()
    assert (statement.status, statement.approved_by) == ("sent", month.admin)
    assert smtp_server.recipients() == ["lead@example.org"]


@pytest.mark.parametrize("args, message", [
    (["--month", "2026-13"], "--month: 2026-13 is not a month."),
    (["--month", "2027-01"], "--month: 2027-01 has not started yet."),
    (["--month", "2026-10", "--approve", "--as", "lead"], "--as: 'lead' is not an admin"),
])
def test_bad_input_is_a_command_error(month, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


def test_approval_before_the_settlement_delay_says_when(month, time_machine):
    time_machine.move_to(SETTLED - timedelta(hours=30), tick=False)
    with pytest.raises(CommandError, match="can be approved from 2026-11-04 00:00Z"):
        run("--month", "2026-10", "--approve")
