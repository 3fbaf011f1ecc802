"""An approved statement is a snapshot, its PDF's chart included: usage that changes after
approval (late samples re-attributing the month) changes neither its PDF nor its CSV; a
draft's chart follows the usage."""

from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from gpuquota.usage.daily import daily_usage
from gpuquota.usage.sweep import dirty_hours_process
from reports.daily import statement_daily_usage
from reports.documents import statement_csv_bytes, statement_pdf_bytes
from reports.models import Statement
from reports.services_statements import statement_approve
from tests.stmtdocs.factories import NOW, OCTOBER, draft, priced_gpus
from tests.usage.factories import minute_samples, reserve

pytestmark = pytest.mark.postgres
START = OCTOBER.start + timedelta(days=3)  # 2026-10-04 00:00 UTC


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def october(roles):
    """Vision's October: 3 h reserved on the 4th, the first hour reported busy; drafted."""
    [gpu] = priced_gpus(1)
    reserve(roles.team, gpu, START, START + timedelta(hours=3))
    minute_samples(gpu, START, 60, util=60)
    draft(OCTOBER)
    return gpu, Statement.objects.get(team=roles.team, month=OCTOBER.start.date())


def late_samples(gpu) -> None:
    """The second and third hours arrive after approval (a spool backlog), rolled up."""
    minute_samples(gpu, START + timedelta(hours=1), 120, util=60)
    dirty_hours_process()


def fourth(days) -> tuple[int, Fraction]:
    [day] = [d for d in days if d.day == START.date()]
    return day.reserved_s, day.busy_s


def test_approval_freezes_the_chart_and_late_usage_changes_neither_pdf_nor_csv(
        october, roles):
    gpu, statement = october
    statement = statement_approve(statement=statement, by=roles.admin, now=NOW)
    assert fourth(statement_daily_usage(statement)) == (10800, Fraction(3600))
    pdf, csv = statement_pdf_bytes(statement=statement, now=NOW), statement_csv_bytes(
        statement=statement)
    assert statement_pdf_bytes(statement=statement, now=NOW) == pdf  # the PDF is reproducible

    late_samples(gpu)
    assert fourth(daily_usage(period=OCTOBER, team=roles.team)) == (10800, Fraction(10800))
    statement = Statement.objects.get(pk=statement.pk)
    assert fourth(statement_daily_usage(statement)) == (10800, Fraction(3600))
    assert statement_pdf_bytes(statement=statement, now=NOW) == pdf
    assert statement_csv_bytes(statement=statement) == csv
    Path("test-artifacts").mkdir(exist_ok=True)  # for a human to look at (pdftoppm -png)
    Path("test-artifacts/statement-approved-after-late-usage.pdf").write_bytes(pdf)


def test_a_drafts_chart_follows_the_usage(october):
    gpu, statement = october
    before = statement_pdf_bytes(statement=statement, now=NOW)
    assert statement.daily_usage is None
    late_samples(gpu)
    assert fourth(statement_daily_usage(statement)) == (10800, Fraction(10800))
    assert statement_pdf_bytes(statement=statement, now=NOW) != before


def test_the_snapshot_is_frozen_by_the_database(october, roles):
    from django.db import IntegrityError, connection, transaction

    _gpu, statement = october
    statement = statement_approve(statement=statement, by=roles.admin, now=NOW)
    with pytest.raises(IntegrityError, match="cannot change"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute("UPDATE reports_statement SET daily_usage = '[]' WHERE id = %s",
                       [statement.pk])
