"""Statements mailed to the team's leads through a real SMTP server on loopback: the
summary in the body, CSV and PDF attached, `sent` only once every lead is served, a retry
after an outage mails only those not yet served, approval sends after commit."""

import io
from datetime import timedelta

import pypdf
import pytest

from accounts.models import Membership
from gpuquota.core.errors import Conflict
from gpuquota.inventory.models import Gpu
from gpuquota.mail.models import MailDelivery
from reports.export import statement_csv
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statement_approve
from reports.tasks import statement_send_task
from tests.factories import MembershipFactory, UserFactory
from tests.stmtdocs.factories import (
    NOW,
    OCTOBER,
    SEPTEMBER,
    draft,
    priced_gpus,
    reserved_hours,
)

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


def test_the_task_does_not_retry_itself_and_is_idempotent(approved, leads, smtp_server):
    smtp_server.stop()
    assert len(statement_send_task(approved.pk)["failed"]) == 2  # left to the sweep
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


def test_the_sweep_retries_a_failed_sending_after_its_backoff(
        approved, leads, smtp_server, time_machine):
    from reports.tasks import BEAT_SCHEDULE, statements_send_pending_task

    assert BEAT_SCHEDULE["statements-send-pending"]["schedule"] == 60
    smtp_server.stop()  # the approval's send fails: both leads wait 1 minute for a retry
    assert not statement_send(statement=approved).complete
    assert statements_send_pending_task.apply().get() == {"queued": []}
    time_machine.move_to(NOW + timedelta(seconds=121), tick=False)
    assert statements_send_pending_task.apply().get() == {"queued": [approved.pk]}  # fails
    time_machine.move_to(NOW + timedelta(seconds=121 + 61), tick=False)
    assert statements_send_pending_task.apply().get() == {"queued": []}  # now 2 minutes
    smtp_server.start()
    time_machine.move_to(NOW + timedelta(seconds=121 + 121), tick=False)
    assert statements_send_pending_task.apply().get() == {"queued": [approved.pk]}
    approved.refresh_from_db()
    assert approved.status == Statement.Status.SENT and len(smtp_server.messages) == 2
    assert statements_send_pending_task.apply().get() == {"queued": []}
    assert set(MailDelivery.objects.values_list("attempts", flat=True)) == {3}


def test_the_sweep_starts_a_sending_that_never_began_or_was_interrupted(
        approved, leads, roles, smtp_server, time_machine):
    from reports.tasks import statements_send_pending_task

    [gpu] = Gpu.objects.all()
    reserved_hours(roles.team, gpu, SEPTEMBER.start + timedelta(days=3), 1, reported_minutes=0)
    draft(SEPTEMBER)
    other = statement_approve(statement=Statement.objects.get(
        team=roles.team, month=SEPTEMBER.start.date()), by=roles.admin, now=NOW)
    key = f"statement:{approved.pk}"
    MailDelivery.objects.create(key=key, recipient=leads[0], template="statement", attempts=1)
    assert statements_send_pending_task.apply().get() == {"queued": []}  # both too recent
    time_machine.move_to(NOW + timedelta(seconds=121), tick=False)
    # `approved`: a lead claimed 2 minutes ago and never served (its worker was killed);
    # `other`: approved 2 minutes ago and no send ever began (its task was lost)
    assert statements_send_pending_task.apply().get() == {"queued": [approved.pk, other.pk]}
    assert {s.status for s in Statement.objects.all()} == {Statement.Status.SENT}
    assert sorted(smtp_server.recipients()) == ["lead2@example.org", "lead2@example.org",
                                                "lead@example.org", "lead@example.org"]


def test_the_sweep_waits_for_a_live_sender_and_for_a_team_without_lead(
        approved, leads, roles, smtp_server, time_machine, settings):
    from reports.tasks import statements_send_pending_task

    key = f"statement:{approved.pk}"
    time_machine.move_to(NOW + timedelta(seconds=121), tick=False)
    MailDelivery.objects.create(key=key, recipient=leads[0], template="statement", attempts=1)
    assert statements_send_pending_task.apply().get() == {"queued": []}  # claimed just now
    MailDelivery.objects.filter(key=key).delete()
    Membership.objects.filter(team=roles.team, role=Membership.Role.LEAD).update(
        valid_until=NOW)
    assert statements_send_pending_task.apply().get() == {"queued": []}  # no lead
    time_machine.move_to(NOW + timedelta(hours=1, seconds=30), tick=False)
    assert statements_send_pending_task.apply().get() == {"queued": [approved.pk]}  # hourly
    settings.MAIL_ENABLED = False
    time_machine.move_to(NOW + timedelta(hours=2, seconds=30), tick=False)
    assert statements_send_pending_task.apply().get() == {"queued": []}  # mail is off
