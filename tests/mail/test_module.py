"""One module sends every email; the settings that drive it; the profile's opt-out; the
demo's file sink."""

import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuquota.mail.services import Attachment, mail_send
from gpuquota.settings import email_settings
from tests.factories import UserFactory
from tests.foundation.test_settings import run_probe

ROOT = Path(__file__).resolve().parents[2]
MAIL_MODULE = ROOT / "gpuquota" / "mail"
SENDING = re.compile(r"django\.core\.mail|\bsend_mail\b|\bsend_mass_mail\b|\bEmailMessage\b|"
                     r"\bEmailMultiAlternatives\b|\bmail_admins\b|\bmail_managers\b|smtplib")


def test_nothing_outside_the_mail_module_sends_email():
    offenders = []
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in (".venv", "tests", "var", "node_modules") or \
                path.is_relative_to(MAIL_MODULE) or relative == Path("gpuquota/settings.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SENDING.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_the_check_itself_finds_a_sender():
    assert SENDING.search("from django.core.mail import send_mail")
    assert SENDING.search((MAIL_MODULE / "services.py").read_text())


def test_file_email_url():
    assert email_settings("file://var/mail") == {
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(ROOT / "var" / "mail"),
    }
    assert email_settings("file:///srv/mail")["EMAIL_FILE_PATH"] == "/srv/mail"
    with pytest.raises(ImproperlyConfigured, match="names no folder"):
        email_settings("file://")


def test_production_with_mail_on_and_no_email_url_refuses_to_start(tmp_path):
    import subprocess

    with pytest.raises(subprocess.CalledProcessError) as failure:
        run_probe(tmp_path, DEBUG="0", SECRET_KEY="x" * 50)
    assert "Mail is on but EMAIL_URL is not set" in failure.value.stderr
    assert run_probe(tmp_path, DEBUG="0", SECRET_KEY="x" * 50,
                     GPUQUOTA_MAIL_ENABLED="0")["email"].endswith("console.EmailBackend")
    assert run_probe(tmp_path, DEBUG="0", SECRET_KEY="x" * 50,
                     EMAIL_URL="smtp://mail.example.org")["email"].endswith("smtp.EmailBackend")
    with pytest.raises(subprocess.CalledProcessError) as failure:
        run_probe(tmp_path, GPUQUOTA_MAIL_ENABLED="maybe")
    assert "GPUQUOTA_MAIL_ENABLED must be a boolean" in failure.value.stderr


def test_the_off_switch_comes_from_the_environment(tmp_path):
    import json
    import os
    import subprocess
    import sys

    probe = ("import django, json; django.setup(); from django.conf import settings; "
             "print(json.dumps(settings.MAIL_ENABLED))")
    env = {k: v for k, v in os.environ.items() if k != "GPUQUOTA_MAIL_ENABLED"}
    for value, expected in ((None, True), ("0", False), ("1", True)):
        if value is not None:
            env["GPUQUOTA_MAIL_ENABLED"] = value
        out = subprocess.run([sys.executable, "-c", probe], env={
            **env, "DJANGO_SETTINGS_MODULE": "gpuquota.settings",
            "GPUQUOTA_VAR_DIR": str(tmp_path)}, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout.strip().splitlines()[-1]) is expected


def test_the_profile_page_sets_the_opt_out_and_mail_honours_it(db, client, smtp_server,
                                                               test_templates):
    ann = UserFactory(username="ann")
    client.force_login(ann)
    page = client.get("/accounts/profile/")
    assert b'name="email_opt_out"' in page.content and b"No email from gpuquota" in page.content
    response = client.post("/accounts/profile/", {
        "first_name": "Ann", "last_name": "Lee", "email": ann.email, "timezone": "UTC",
        "email_opt_out": "on"})
    assert response.status_code == 302
    ann.refresh_from_db()
    assert ann.email_opt_out is True
    outcome = mail_send(template="test_notice", recipients=[ann],
                        context={"title": "t", "at": None}, key="profile")
    assert outcome.skipped == [ann] and smtp_server.messages == []


def test_the_file_sink_keeps_every_message_with_its_attachments(db, settings, tmp_path,
                                                               test_templates):
    import email
    import email.policy

    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path / "mail")
    pdf = b"%PDF-1.4 \x00\xff binary"
    mail_send(template="test_notice", recipients=[UserFactory(), UserFactory()],
              context={"title": "Statement", "at": None}, key="file-sink",
              attachments=[Attachment("statement.pdf", pdf, "application/pdf")])
    [sink] = (tmp_path / "mail").iterdir()  # one file per call, a separator line per message
    messages = [email.message_from_bytes(raw.strip(), policy=email.policy.default)
                for raw in sink.read_bytes().split(b"-" * 79) if raw.strip()]
    assert len(messages) == 2
    for message in messages:
        [attachment] = message.iter_attachments()
        assert attachment.get_filename() == "statement.pdf"
        assert attachment.get_payload(decode=True) == pdf
