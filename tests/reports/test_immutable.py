"""Approved statements are refused by the database itself on UPDATE and DELETE, their
lines and adjustments too (raw SQL, bypassing every Python check); only approved → sent."""

import pytest
from django.db import IntegrityError, connection, transaction

from reports.models import Statement, StatementLine
from reports.services_statements import adjustment_add, statement_approve, statement_draft
from tests.reports.factories import OCT_3, OCTOBER, SETTLED, h100, reserved_hours

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def approved(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    reserved_hours(roles.team, h100(), OCT_3, 10)
    adjustment_add(team=roles.team, period=OCTOBER, amount="-1.00", reason="credit",
                   by=roles.admin)
    statement = statement_draft(team=roles.team, period=OCTOBER)
    return statement_approve(statement=statement, by=roles.admin)


def refused(sql: str, params=()) -> str:
    with pytest.raises(IntegrityError) as error, transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(sql, params)
    return str(error.value)


def run(sql: str, params=()) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def test_a_draft_can_change(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    reserved_hours(roles.team, h100(), OCT_3, 10)
    draft = statement_draft(team=roles.team, period=OCTOBER)
    assert run("UPDATE reports_statement SET total = 1 WHERE id = %s", [draft.pk]) == 1
    assert run("DELETE FROM reports_statementline WHERE statement_id = %s", [draft.pk]) == 1
    assert run("DELETE FROM reports_statement WHERE id = %s", [draft.pk]) == 1


@pytest.mark.parametrize("sql", [
    "UPDATE reports_statement SET total = total + 1 WHERE id = %s",
    "UPDATE reports_statement SET currency = 'EUR' WHERE id = %s",
    "UPDATE reports_statement SET team_name = 'Renamed' WHERE id = %s",
    "UPDATE reports_statement SET status = 'draft' WHERE id = %s",
    "UPDATE reports_statement SET approved_at = approved_at + interval '1 day' WHERE id = %s",
    "UPDATE reports_statement SET status = 'sent' WHERE id = %s",  # sent without sent_at
    "UPDATE reports_statement SET status = 'sent', sent_at = now(), total = 0 WHERE id = %s",
    "DELETE FROM reports_statement WHERE id = %s",
])
def test_the_statement_row_is_frozen(approved, sql):
    assert "approved" in refused(sql, [approved.pk])
    approved.refresh_from_db()
    assert approved.total == 24 and approved.status == "approved"


@pytest.mark.parametrize("sql", [
    "UPDATE reports_statementline SET amount = 0 WHERE statement_id = %s",
    "UPDATE reports_statementline SET gpu_class_name = 'renamed' WHERE statement_id = %s",
    "DELETE FROM reports_statementline WHERE statement_id = %s",
    "INSERT INTO reports_statementline (statement_id, position, kind, gpu_class_name, amount,"
    " reason) VALUES (%s, 99, 'adjustment', '', 5, 'sneaked in')",
])
def test_its_lines_are_frozen(approved, sql):
    assert "approved statement" in refused(sql, [approved.pk])
    assert [line.amount for line in approved.lines.all()] == [25, -1]


def test_a_line_cannot_move_to_an_approved_statement(approved, roles):
    other = statement_draft(team=roles.other_team, period=OCTOBER)
    StatementLine.objects.create(statement=other, position=1, kind="adjustment", amount=3,
                                 reason="x")
    refused("UPDATE reports_statementline SET statement_id = %s WHERE statement_id = %s",
            [approved.pk, other.pk])


@pytest.mark.parametrize("sql", [
    "UPDATE reports_adjustment SET amount = 100 WHERE team_id = %s",
    "DELETE FROM reports_adjustment WHERE team_id = %s",
    "INSERT INTO reports_adjustment (team_id, month, amount, reason, created_by_id, created_at)"
    " SELECT %s, '2026-10-01', 5, 'late', created_by_id, now() FROM reports_adjustment",
])
def test_adjustments_of_an_approved_month_are_frozen(approved, sql):
    assert "approved month" in refused(sql, [approved.team_id])


def test_only_approved_to_sent_with_sent_at_then_nothing(approved):
    assert run("UPDATE reports_statement SET status = 'sent', sent_at = now() WHERE id = %s",
               [approved.pk]) == 1
    assert "sent" in refused("UPDATE reports_statement SET sent_at = now() + interval '1 h' "
                             "WHERE id = %s", [approved.pk])
    assert "sent" in refused("DELETE FROM reports_statement WHERE id = %s", [approved.pk])
    # a no-op update (what a full save() of unchanged values does) is harmless
    assert run("UPDATE reports_statement SET total = total WHERE id = %s", [approved.pk]) == 1
    assert Statement.objects.get(pk=approved.pk).status == "sent"
