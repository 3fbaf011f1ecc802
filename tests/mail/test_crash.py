"""Racing senders and a sender killed mid-send, on PostgreSQL: each recipient exactly once."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from gpuquota.mail.models import MailDelivery
from gpuquota.mail.services import mail_send
from tests.factories import UserFactory
from tests.helpers import run_concurrently
from tests.mail.conftest import TEMPLATES

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_templates")]
ROOT = Path(__file__).resolve().parents[2]
CONTEXT = {"title": "Your statement", "at": None}

SENDER = """
import sys, django
django.setup()
from django.conf import settings
settings.TEMPLATES[0]["DIRS"].append(sys.argv[1])
from accounts.models import User
from gpuquota.mail.services import mail_send
users = list(User.objects.filter(pk__in=[int(pk) for pk in sys.argv[2].split(",")]).order_by("pk"))
mail_send(template="test_notice", recipients=users, context={"title": "Your statement",
          "at": None}, key="statement:killed")
"""


def send(users, key):
    return mail_send(template="test_notice", recipients=users, context=CONTEXT, key=key)


def test_a_concurrent_double_call_never_mails_twice(smtp_server):
    users = [UserFactory() for _ in range(6)]
    outcomes = run_concurrently([lambda: send(users, "race"), lambda: send(users, "race")])
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    sent = [u.pk for o in outcomes for u in o.sent]
    assert sorted(sent) == sorted(u.pk for u in users)
    for outcome in outcomes:  # what one did not send, it found already served
        assert {u.pk for u in outcome.sent} | {u.pk for u in outcome.already} == set(sent)
    assert sorted(smtp_server.recipients()) == sorted(u.email for u in users)
    assert set(MailDelivery.objects.values_list("status", flat=True)) == {"sent"}


def _suite_database_url() -> str:
    db = connection.settings_dict
    return (f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
            f"/{db['NAME']}")


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(120)
def test_a_sender_killed_mid_send_then_a_retry_mails_each_recipient_once(smtp_server):
    first, killed_on, last = (UserFactory() for _ in range(3))
    smtp_server.hang.add(killed_on.email)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(DATABASE_URL=_suite_database_url(), DJANGO_SETTINGS_MODULE="gpuquota.settings",
               EMAIL_URL=f"smtp://127.0.0.1:{smtp_server.port}")
    sender = subprocess.Popen(
        [sys.executable, "-c", SENDER, str(TEMPLATES), f"{first.pk},{killed_on.pk},{last.pk}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(lambda: smtp_server.hanging == 1 or sender.poll() is not None, 60,
                  "the sender to be in the middle of the second message")
        assert sender.poll() is None, sender.stdout.read().decode()
        sender.send_signal(signal.SIGKILL)  # mid-conversation, holding the row lock
        sender.wait(timeout=10)
    finally:
        if sender.poll() is None:
            sender.kill()
        sender.stdout.close()
    rows = {r.recipient_id: r for r in MailDelivery.objects.all()}
    assert rows[first.pk].status == "sent"
    assert rows[killed_on.pk].status == "sending" and rows[killed_on.pk].attempts == 1
    assert last.pk not in rows
    smtp_server.hang.clear()

    retry = send([first, killed_on, last], "statement:killed")  # waits for no lock
    assert retry.already == [first] and retry.sent == [killed_on, last]
    assert sorted(smtp_server.recipients()) == sorted([first.email, killed_on.email, last.email])
    assert MailDelivery.objects.get(recipient=killed_on).attempts == 2
