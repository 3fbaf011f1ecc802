"""Statement numbers (given once at approval, a sequence per month, shown on the page, the
PDF, the CSV, the export and FOCUS) and the copies of the statement mail to the
organisation's finance mailbox and the team's cost-center owner, through a real SMTP server
on loopback (docs/chargeback.md, "Statement numbers and copies")."""

import io
from datetime import timedelta

import pypdf
import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from reports.export import statement_csv, statement_export
from reports.focus import focus_rows
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statement_approve, statement_number_next
from tests.factories import UserFactory
from tests.stmtdocs.factories import NOW, OCTOBER, draft, priced_gpus, reserved_hours

pytestmark = [pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def october(roles):
    gpu, other = priced_gpus(2)
    reserved_hours(roles.team, gpu, OCTOBER.start + timedelta(days=3), 3, reported_minutes=0)
    reserved_hours(roles.other_team, other, OCTOBER.start + timedelta(days=3), 2,
                   reported_minutes=0)
    draft(OCTOBER)
    return roles


def test_numbers_are_given_once_at_approval_in_sequence(october, settings):
    settings.STATEMENT_NUMBER_PREFIX = "ERI"
    vision = Statement.objects.get(team=october.team)
    speech = Statement.objects.get(team=october.other_team)
    assert vision.number is None and statement_export(vision)["number"] is None
    vision = statement_approve(statement=vision, by=october.admin, now=NOW)
    speech = statement_approve(statement=speech, by=october.admin, now=NOW)
    assert (vision.number, speech.number) == ("ERI-2026-10-0001", "ERI-2026-10-0002")
    assert statement_number_next(month=OCTOBER.start.date()) == "ERI-2026-10-0003"
    with pytest.raises(IntegrityError), transaction.atomic():
        Statement.objects.filter(pk=speech.pk).update(number=vision.number)
    assert statement_export(vision)["number"] == "ERI-2026-10-0001"
    # The CSV keeps the spec's columns: the number is in the JSON, on the page and the PDF
    assert 'ERI-2026-10-0001' not in statement_csv(vision)
    assert {row["InvoiceId"] for row in focus_rows(statements=[vision], period=OCTOBER)} == {
        "ERI-2026-10-0001"}
    client = Client()
    client.force_login(october.lead)
    page = client.get("/statements/vision/2026-10/").content.decode()
    assert 'id="statement-number">ERI-2026-10-0001<' in page
    pdf = client.get("/statements/vision/2026-10.pdf").content
    text = "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    assert "ERI-2026-10-0001" in text


def test_finance_and_the_cost_center_owner_get_one_copy(october, smtp_server, settings):
    settings.FINANCE_EMAIL = "finance@example.org"
    team = october.team
    team.cost_center_owner_email = "cc-owner@example.org"
    team.save()
    second = UserFactory(username="lead2")
    team.memberships.create(user=second, role="lead", valid_from=OCTOBER.start)
    statement = statement_approve(statement=Statement.objects.get(team=team), by=october.admin,
                                  now=NOW)
    outcome = statement_send(statement=statement)
    assert outcome.complete
    assert sorted(smtp_server.recipients()) == [
        "cc-owner@example.org", "finance@example.org", "lead2@example.org",
        "lead@example.org"]  # one copy each, on the first lead's message
    [message] = smtp_server.to("finance@example.org")
    assert message.message["Cc"] == "finance@example.org, cc-owner@example.org"
    assert "lead@example.org" in message.rcpt_tos
    statement_send(statement=statement)  # served already: nothing again
    assert len(smtp_server.recipients()) == 4
    settings.FINANCE_EMAIL = "not an address"
    speech = statement_approve(statement=Statement.objects.get(team=october.other_team),
                               by=october.admin, now=NOW)
    statement_send(statement=speech)
    assert smtp_server.recipients()[4:] == ["other_lead@example.org"]
