"""The mail.send task: after commit, retried while the server is down, idempotent."""

import pytest
from celery.exceptions import MaxRetriesExceededError
from django.db import transaction

from gpuquota.celery import app
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.services import mail_send_later
from gpuquota.mail.tasks import mail_send_task
from tests.factories import UserFactory

pytestmark = pytest.mark.usefixtures("test_templates")


def later(users, key="task-key"):
    mail_send_later(template="test_notice", recipients=users,
                    context={"title": "Drafts ready", "at": None}, key=key)


def test_sent_after_commit_only(db, smtp_server, django_capture_on_commit_callbacks):
    ann = UserFactory()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():
            later([ann])
            assert smtp_server.messages == []  # not before the commit
    assert len(callbacks) == 1
    callbacks[0]()
    assert smtp_server.recipients() == [ann.email]


def test_retried_while_the_server_is_down_then_each_recipient_once(db, smtp_server):
    users = [UserFactory() for _ in range(3)]
    kwargs = {"template": "test_notice", "recipient_ids": [u.pk for u in users],
              "context": {"title": "Drafts ready", "at": None}, "key": "outage"}
    smtp_server.stop()
    # Eagerly, each retry runs at once (a worker waits 1, 2, 4... minutes in between);
    # not propagating lets the whole chain of retries run in the test.
    app.conf.task_eager_propagates = False
    try:
        result = mail_send_task.apply(kwargs=kwargs)
    finally:
        app.conf.task_eager_propagates = True
    assert result.state == "FAILURE" and isinstance(result.result, MaxRetriesExceededError)
    first = MailDelivery.objects.get(recipient=users[0])
    assert first.status == "failed" and first.attempts == 1 + mail_send_task.max_retries

    smtp_server.start()
    assert mail_send_task.apply(kwargs=kwargs).get()["sent"] == [u.pk for u in users]
    assert mail_send_task.apply(kwargs=kwargs).get()["already"] == [u.pk for u in users]
    assert sorted(smtp_server.recipients()) == sorted(u.email for u in users)


def test_the_context_must_survive_json(db):
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        mail_send_later(template="test_notice", recipients=[UserFactory()],
                        context={"user": object()}, key="k")
