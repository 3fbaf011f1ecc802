"""mail_send through a real SMTP server on loopback: one message per recipient, text and
HTML alternatives, attachments intact, opt-out, the off switch, an outage, a resend."""

from datetime import UTC, datetime

import pytest

from gpuquota.mail.models import MailDelivery
from gpuquota.mail.services import Attachment, mail_send
from tests.factories import UserFactory

pytestmark = pytest.mark.usefixtures("test_templates")
AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
D = MailDelivery.Status


def send(recipients, key="k1", **kwargs):
    return mail_send(template="test_notice", recipients=recipients,
                     context={"title": "Fish & chips <b>", "at": AT}, key=key, **kwargs)


def test_one_message_per_recipient_with_text_and_html(db, smtp_server):
    ann = UserFactory(username="ann", timezone="Europe/Berlin")
    bob = UserFactory(username="bob")
    outcome = send([ann, bob, ann])

    assert outcome.sent == [ann, bob] and outcome.complete
    assert sorted(smtp_server.recipients()) == ["ann@example.org", "bob@example.org"]
    [to_ann] = smtp_server.to("ann@example.org")
    assert to_ann.message["Subject"] == "Notice for ann: Fish & chips <b>"
    assert to_ann.message["To"] == "ann@example.org"
    assert to_ann.message.get_content_type() == "multipart/alternative"
    assert "Fish & chips <b> at 2026-12-01 10:30 CET." in to_ann.text()  # her time zone
    assert "<strong>Fish &amp; chips &lt;b&gt;</strong> at 2026-12-01 10:30 CET" in to_ann.html()
    assert "09:30 UTC" in smtp_server.to("bob@example.org")[0].text()
    ann_row = MailDelivery.objects.get(key="k1", recipient=ann)
    assert ann_row.status == D.SENT and ann_row.attempts == 1 and ann_row.sent_at
    assert to_ann.message["Message-ID"] == ann_row.message_id


def test_attachments_arrive_intact(db, smtp_server):
    pdf = bytes(range(256)) * 40  # binary, every byte value
    csv = "team,amount\nVision,1234.50\nÉquipe,0.01\n".encode()
    send([UserFactory()], attachments=[
        Attachment("statement.pdf", pdf, "application/pdf"),
        Attachment("statement.csv", csv, "text/csv"),
    ])
    [received] = smtp_server.messages
    attachments = received.attachments()
    assert attachments["statement.pdf"] == ("application/pdf", pdf)
    assert attachments["statement.csv"] == ("text/csv", csv)
    assert "Fish & chips" in received.text()


def test_served_once_per_key(db, smtp_server):
    ann = UserFactory()
    send([ann])
    again = send([ann])
    assert again.already == [ann] and again.sent == [] and again.complete
    assert len(smtp_server.messages) == 1
    send([ann], key="k2")  # another key is another message
    assert len(smtp_server.messages) == 2


def test_force_resends_with_the_same_message_id(db, smtp_server):
    ann = UserFactory()
    send([ann])
    assert send([ann], force=True).sent == [ann]
    first, second = smtp_server.messages
    assert first.message["Message-ID"] == second.message["Message-ID"]
    assert MailDelivery.objects.get(recipient=ann).attempts == 2


def test_opt_out_and_no_address_are_skipped_and_recorded(db, smtp_server):
    quiet = UserFactory(email_opt_out=True)
    nowhere = UserFactory(email="")
    ann = UserFactory()
    outcome = send([quiet, nowhere, ann])
    assert outcome.skipped == [quiet, nowhere] and outcome.sent == [ann] and outcome.complete
    assert smtp_server.recipients() == [ann.email]
    rows = {r.recipient_id: r for r in MailDelivery.objects.all()}
    assert rows[quiet.pk].status == D.SKIPPED and "opted out" in rows[quiet.pk].error
    assert rows[nowhere.pk].status == D.SKIPPED and rows[nowhere.pk].error == "no email address"
    assert rows[quiet.pk].attempts == 0


def test_off_switch_sends_and_records_nothing(db, smtp_server, settings):
    settings.MAIL_ENABLED = False
    ann = UserFactory()
    outcome = send([ann])
    assert outcome.disabled and not outcome.complete and outcome.sent == []
    assert smtp_server.messages == [] and not MailDelivery.objects.exists()
    settings.MAIL_ENABLED = True  # switched on again: nothing was recorded as served
    assert send([ann]).sent == [ann]


def test_server_down_then_up_mails_each_recipient_exactly_once(db, smtp_server):
    users = [UserFactory() for _ in range(3)]
    send(users[:1])  # one served before the outage
    smtp_server.stop()
    down = send(users)
    assert down.already == users[:1] and [u for u, _ in down.failed] == users[1:]
    assert not down.complete
    assert "ConnectionRefusedError" in down.failed[0][1]
    assert {r.status for r in MailDelivery.objects.exclude(recipient=users[0])} == {D.FAILED}

    smtp_server.start()
    up = send(users)
    assert up.sent == users[1:] and up.already == users[:1] and up.complete
    assert sorted(smtp_server.recipients()) == sorted(u.email for u in users)
    assert send(users).already == users  # and never again


def test_a_refused_recipient_fails_alone(db, smtp_server):
    ann, bob = UserFactory(), UserFactory()
    smtp_server.refused.add(ann.email)
    outcome = send([ann, bob])
    assert [u for u, _ in outcome.failed] == [ann] and outcome.sent == [bob]
    assert "550" in outcome.failed[0][1]
    smtp_server.refused.clear()
    assert send([ann, bob]).sent == [ann]


def test_an_interrupted_attempt_is_sent_again_with_its_message_id(db, smtp_server):
    """A worker killed mid-send leaves the row `sending`: the next call sends it (at least
    once), under the same Message-ID."""
    ann = UserFactory()
    MailDelivery.objects.create(key="k1", recipient=ann, template="test_notice",
                                status=D.SENDING, attempts=1)
    assert send([ann]).sent == [ann]
    row = MailDelivery.objects.get(recipient=ann)
    assert row.status == D.SENT and row.attempts == 2


def test_mail_send_refuses_to_run_inside_a_transaction(db, smtp_server):
    from django.db import transaction

    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        send([UserFactory()])
    assert smtp_server.messages == []
