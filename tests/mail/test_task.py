"""The outbox (gpuquota.mail.outbox): written with the change, sent after commit by
`mail.send`, swept by `mail.send_due`, retried with backoff, given up at the end."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from gpuquota.mail.conf import lease_s
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.outbox import mail_send_later, mail_send_queued
from gpuquota.mail.tasks import BEAT_SCHEDULE, mail_send_due_task
from tests.factories import UserFactory

pytestmark = pytest.mark.usefixtures("test_templates")
D = MailDelivery.Status
MINUTE = timedelta(minutes=1)


def later(users, key="task-key"):
    return mail_send_later(template="test_notice", recipients=users,
                           context={"title": "Drafts ready", "at": timezone.now()}, key=key)


def test_written_in_the_transaction_and_sent_after_commit_only(
        db, smtp_server, django_capture_on_commit_callbacks):
    ann = UserFactory()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            assert later([ann]) == 1
            row = MailDelivery.objects.get(recipient=ann)
            assert row.status == D.QUEUED and row.attempts == 0
            assert smtp_server.messages == []  # not before the commit
    assert len(callbacks) == 1
    callbacks[0]()
    assert smtp_server.recipients() == [ann.email]
    assert MailDelivery.objects.get(recipient=ann).status == D.SENT


def test_rolled_back_with_the_change_that_caused_it(db, smtp_server,
                                                    django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            later([UserFactory()])
            raise RuntimeError("the change fails")
    assert not MailDelivery.objects.exists() and smtp_server.messages == []


def test_queued_twice_under_one_key_is_one_message(db, smtp_server,
                                                   django_capture_on_commit_callbacks):
    ann = UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        later([ann, ann])
    with django_capture_on_commit_callbacks(execute=True):
        assert later([ann]) == 0
    assert smtp_server.recipients() == [ann.email]


def test_the_sweep_sends_what_no_task_sent_each_recipient_once(db, smtp_server):
    users = [UserFactory() for _ in range(3)]
    later(users, key="a")
    later(users[:1], key="b")  # the test's transaction never commits: no task ran
    assert smtp_server.messages == []
    summary = mail_send_due_task.apply().get()
    assert sorted(summary["sent"]) == sorted([u.pk for u in users] + [users[0].pk])
    assert mail_send_due_task.apply().get()["sent"] == []  # and never again
    assert len(smtp_server.to(users[0].email)) == 2 and len(smtp_server.messages) == 4
    assert "Drafts ready" in smtp_server.messages[0].text()  # rendered from the stored context


def test_a_failure_is_retried_with_backoff_then_given_up(db, smtp_server, settings):
    settings.MAIL_MAX_ATTEMPTS = 4
    ann = UserFactory()
    later([ann])
    smtp_server.stop()
    now = timezone.now()
    waits = []
    for attempt in range(1, 5):
        outcome = mail_send_queued(now=now)
        assert [u for u, _ in outcome.failed] == [ann]
        row = MailDelivery.objects.get(recipient=ann)
        assert row.attempts == attempt and "ConnectionRefusedError" in row.error
        if attempt == 4:
            assert row.status == D.GIVEN_UP  # the final failed state
            break
        assert row.status == D.FAILED
        waits.append(row.next_attempt_at - now)
        assert mail_send_queued(now=row.next_attempt_at - timedelta(seconds=1)).failed == []
        now = row.next_attempt_at
    assert waits == [MINUTE, 2 * MINUTE, 4 * MINUTE]
    smtp_server.start()
    assert mail_send_queued(now=now + timedelta(days=1)).sent == []  # given up stays so
    assert smtp_server.messages == []


def test_the_server_back_before_the_last_attempt_serves_each_once(db, smtp_server):
    users = [UserFactory() for _ in range(3)]
    later(users)
    smtp_server.stop()
    assert len(mail_send_queued().failed) == 3
    smtp_server.start()
    assert mail_send_queued().sent == []  # not due yet
    assert mail_send_queued(now=timezone.now() + MINUTE).sent == users
    assert mail_send_queued(now=timezone.now() + timedelta(days=1)).sent == []
    assert sorted(smtp_server.recipients()) == sorted(u.email for u in users)


def test_a_killed_senders_rows_come_due_when_its_lease_ends(db, smtp_server):
    """A worker killed mid-send leaves `sending` leased: sent again (same Message-ID) only
    when the lease ends, so a live sender of the row is never raced."""
    ann = UserFactory()
    later([ann], key="killed")
    now = timezone.now()
    MailDelivery.objects.filter(recipient=ann).update(
        status=D.SENDING, attempts=1, next_attempt_at=now + timedelta(seconds=lease_s()))
    assert mail_send_queued(now=now).sent == []
    assert mail_send_queued(now=now + timedelta(seconds=lease_s())).sent == [ann]
    row = MailDelivery.objects.get(recipient=ann)
    assert row.status == D.SENT and row.attempts == 2
    assert smtp_server.messages[0].message["Message-ID"] == row.message_id


def test_a_context_that_cannot_render_is_counted_and_given_up(db, smtp_server, settings):
    settings.MAIL_MAX_ATTEMPTS = 1
    ann = UserFactory()
    mail_send_later(template="no_such_template", recipients=[ann], context={}, key="broken")
    assert [u for u, _ in mail_send_queued().failed] == [ann]
    row = MailDelivery.objects.get(recipient=ann)
    assert row.status == D.GIVEN_UP and row.attempts == 1 and "TemplateDoesNotExist" in row.error


def test_off_switch_queues_nothing_and_the_sweep_sends_nothing(db, smtp_server, settings):
    ann = UserFactory()
    later([ann], key="before")
    settings.MAIL_ENABLED = False
    assert later([ann], key="while-off") == 0
    assert mail_send_queued().disabled and smtp_server.messages == []
    settings.MAIL_ENABLED = True
    assert mail_send_queued().sent == [ann]
    assert MailDelivery.objects.filter(key="while-off").exists() is False


def test_the_sweep_is_on_the_beat_schedule():
    from gpuquota.celery import collect_beat_schedule

    assert collect_beat_schedule()["mail-send-due"] == BEAT_SCHEDULE["mail-send-due"]
    assert BEAT_SCHEDULE["mail-send-due"]["schedule"] == 60


def test_the_context_must_survive_json(db):
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        mail_send_later(template="test_notice", recipients=[UserFactory()],
                        context={"user": object()}, key="k")
