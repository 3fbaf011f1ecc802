"""Statements mailed to the team's leads through a real SMTP server on loopback: the
summary in the body, CSV and PDF attached, `sent` only once every lead is served, a retry
after an outage mails only those not yet served, approval sends after commit."""

import io
from datetime import timedelta

import pypdf
import pytest
from celery.exceptions import Retry

from accounts.models import Membership
from gpuquota.core.errors import Conflict
from gpuquota.mail.models import MailDelivery
from reports.export import statement_csv
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statement_approve
from reports.tasks import statement_send_task
from tests.factories import MembershipFactory, UserFactory
from tests.stmtdocs.factories import NOW, OCTOBER, draft, priced_gpus, reserved_hours

pytestmark = [pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def leads(roles):
    second = UserFactory(username="lead2", first_name="Grace", last_name="Hopper")
    MembershipFactory(user=second, team=roles.team, role=Membership.Role.LEAD)
    return [roles.lead, second]


@pytest.fixture
def approved(roles, leads):
    """Vision's October: 3 h reserved at 2.50, all reported busy; approved."""
    [gpu] = priced_gpus(1)
    reserved_hours(roles.team, gpu, OCTOBER.start + timedelta(days=3), 3, reported_minutes=180)
    draft(OCTOBER)
    statement = Statement.objects.get(team=roles.team, month=OCTOBER.start.date())
    return statement_approve(statement=statement, by=roles.admin, now=NOW)


def _pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(content)).pages)


def test_each_lead_receives_the_statement_with_csv_and_pdf(
    approved, leads, roles, smtp_server, settings
):
    settings.ORGANISATION_NAME = "Example Research Institute"
    outcome = statement_send(statement=approved)

    assert outcome.complete and sorted(u.username for u in outcome.sent) == ["lead", "lead2"]
    assert sorted(smtp_server.recipients()) == ["lead2@example.org", "lead@example.org"]
    assert roles.member.email not in smtp_server.recipients()
    [message] = smtp_server.to("lead2@example.org")
    assert message.message["Subject"] == "GPU statement Vision October 2026: 7.50 USD"
    assert "Hello Grace Hopper" in message.text()
    assert (
        "Example Research Institute has approved" in message.text()
        and "Total: 7.50 USD" in message.text()
    )
    assert "Reserved H100-80GB: 3.00 h at 2.50 = 7.50" in message.text()
    assert "<strong>Vision</strong>" in message.html()
    for body in (message.text(), message.html()):  # the body names both files attached
        assert "statement-vision-2026-10.pdf" in body and "statement-vision-2026-10.csv" in body
    attachments = message.attachments()
    assert set(attachments) == {"statement-vision-2026-10.pdf", "statement-vision-2026-10.csv"}
    mimetype, pdf = attachments["statement-vision-2026-10.pdf"]
    assert mimetype == "application/pdf"
    text = _pdf_text(pdf)
    assert "7.50 USD" in text and "Vision (vision)" in text and "APPROVED" in text
    assert "Example Research Institute" in text and "CC-" in text
    assert attachments["statement-vision-2026-10.csv"] == (
        "text/csv",
        statement_csv(approved).encode(),
    )
    approved.refresh_from_db()
    assert approved.status == Statement.Status.SENT and approved.sent_at == NOW


def test_smtp_down_for_the_first_try_then_up_each_lead_exactly_once(approved, leads, smtp_server):
    smtp_server.stop()
    first = statement_send(statement=approved)
    assert not first.complete and len(first.failed) == 2
    approved.refresh_from_db()
    assert approved.status == Statement.Status.APPROVED and approved.sent_at is None

    smtp_server.start()
    second = statement_send(statement=approved)
    assert second.complete and len(second.sent) == 2
    assert sorted(smtp_server.recipients()) == ["lead2@example.org", "lead@example.org"]
    approved.refresh_from_db()
    assert approved.status == Statement.Status.SENT

    third = statement_send(statement=approved)
    assert len(third.already) == 2 and not third.sent
    assert len(smtp_server.messages) == 2


def test_a_lead_refused_by_the_server_is_retried_alone(approved, leads, smtp_server):
    smtp_server.refused.add("lead2@example.org")
    outcome = statement_send(statement=approved)
    assert [u.username for u in outcome.sent] == ["lead"] and not outcome.complete
    approved.refresh_from_db()
    assert approved.status == Statement.Status.APPROVED

    smtp_server.refused.clear()
    retry = statement_send(statement=approved)
    assert [u.username for u in retry.sent] == ["lead2"] and [
        u.username for u in retry.already
    ] == ["lead"]
    assert sorted(smtp_server.recipients()) == ["lead2@example.org", "lead@example.org"]
    assert MailDelivery.objects.filter(key=f"statement:{approved.pk}", status="sent").count() == 2


def test_a_draft_and_a_team_without_leads_are_not_sent(approved, roles, smtp_server):
    draft_statement = Statement.objects.create(
        team=roles.other_team,
        month=OCTOBER.start.date(),
        team_name="Speech",
        team_slug="speech",
        computed_at=NOW,
        computed_until=OCTOBER.end,
    )
    with pytest.raises(Conflict, match="approve it first"):
        statement_send(statement=draft_statement)
    Membership.objects.filter(team=roles.team, role=Membership.Role.LEAD).update(
        valid_until=NOW - timedelta(days=1)
    )
    with pytest.raises(Conflict, match="no lead"):
        statement_send(statement=approved)
    assert smtp_server.messages == []


def test_the_task_retries_while_the_server_is_down_and_is_idempotent(approved, leads, smtp_server):
    smtp_server.stop()
    with pytest.raises(Retry):
        statement_send_task(approved.pk)
    assert statement_send_task.max_retries == 8
    smtp_server.start()
    assert len(statement_send_task(approved.pk)["sent"]) == 2
    assert statement_send_task(approved.pk)["skipped"] == "not approved or already sent"
    assert len(smtp_server.messages) == 2


def test_approval_sends_after_commit(roles, leads, smtp_server, django_capture_on_commit_callbacks):
    [gpu] = priced_gpus(1)
    reserved_hours(roles.team, gpu, OCTOBER.start + timedelta(days=3), 2, reported_minutes=0)
    draft(OCTOBER)
    statement = Statement.objects.get(team=roles.team, month=OCTOBER.start.date())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        statement_approve(statement=statement, by=roles.admin, now=NOW)
    assert smtp_server.messages == [] and len(callbacks) == 1  # nothing before commit
    callbacks[0]()  # the commit: the task runs (in process in tests, as on the embedded default)
    statement.refresh_from_db()
    assert statement.status == Statement.Status.SENT and len(smtp_server.messages) == 2


def test_the_hourly_sweep_sends_approved_statements_left_unsent(approved, leads, smtp_server):
    from reports.tasks import BEAT_SCHEDULE, statements_send_pending_task

    assert BEAT_SCHEDULE["statements-send-pending"]["task"] == "reports.statements_send_pending"
    smtp_server.stop()  # the after-commit send ran out of retries during an outage
    assert not statement_send(statement=approved).complete
    smtp_server.start()
    assert statements_send_pending_task.apply().get() == {"queued": [approved.pk]}
    approved.refresh_from_db()
    assert approved.status == Statement.Status.SENT and len(smtp_server.messages) == 2
    assert statements_send_pending_task.apply().get() == {"queued": []}
