"""Reservation decisions by mail, through the real loopback SMTP server: admins learn of a
request waiting for approval; the requesting lead of its approval, denial or expiry."""

from datetime import timedelta

import pytest
from django.db import transaction

from gpuquota.mail.models import MailDelivery
from gpuquota.reservations.services import (
    reservation_approve,
    reservation_deny,
    reservations_advance,
)
from tests.factories import AdminFactory
from tests.reservations.factories import NOW, Fleet


@pytest.fixture
def fleet(db):
    return Fleet.create()


@pytest.fixture
def admins(fleet):
    return [fleet.admin, AdminFactory(username="second-admin", timezone="Asia/Tokyo"),
            AdminFactory(username="quiet-admin", email_opt_out=True)]


def over_quota_request(fleet, capture, **kwargs):
    with capture(execute=True):
        return fleet.request(count=6, purpose="ablation runs", **kwargs)  # quota is 4


def test_admins_are_told_of_a_request_waiting_for_approval(
    db, fleet, admins, smtp_server, django_capture_on_commit_callbacks
):
    reservation = over_quota_request(fleet, django_capture_on_commit_callbacks)
    assert reservation.status == "pending"
    assert sorted(smtp_server.recipients()) == ["root@example.org", "second-admin@example.org"]
    [mail] = smtp_server.to("second-admin@example.org")
    assert mail.message["Subject"] == (
        f"Approval needed: Vision asks for 6 H100-80GB GPUs (#{reservation.pk})")
    text = mail.text()
    assert "6 × H100-80GB (over quota)" in text and "ablation runs" in text
    assert "From:          2026-12-01 20:00" in text  # NOW + 1 h in Tokyo
    assert "Times are in your time zone (Asia/Tokyo)" in text
    assert "http://127.0.0.1:8000/reservations/pending/" in text
    assert 'href="http://127.0.0.1:8000/reservations/pending/"' in mail.html()
    quiet = MailDelivery.objects.get(recipient=admins[2])
    assert quiet.status == "skipped" and quiet.key == f"reservation:{reservation.pk}:pending"


def test_no_mail_for_a_request_within_quota(db, fleet, admins, smtp_server,
                                            django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert fleet.request(count=2).status == "scheduled"
    assert smtp_server.messages == []


def test_the_lead_is_told_of_the_approval(db, fleet, admins, smtp_server,
                                          django_capture_on_commit_callbacks):
    reservation = over_quota_request(fleet, django_capture_on_commit_callbacks,
                                     end=NOW + timedelta(hours=2))
    fleet.speech.quotas.all().delete()  # free the fleet for the approval
    with django_capture_on_commit_callbacks(execute=True):
        reservation_approve(reservation=reservation, actor=fleet.admin, reason="conference",
                            now=NOW)
    [mail] = smtp_server.to(fleet.vision_lead.email)
    assert mail.message["Subject"].startswith("Approved: 6 H100-80GB GPUs for Vision")
    assert "approved by root" in mail.text() and "Note from the admin: conference" in mail.text()
    assert "http://127.0.0.1:8000/teams/vision/" in mail.text()
    assert len(smtp_server.messages) == 3  # 2 admins, then the lead


def test_the_lead_is_told_of_a_denial_with_the_reason(db, fleet, admins, smtp_server,
                                                      django_capture_on_commit_callbacks):
    reservation = over_quota_request(fleet, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        reservation_deny(reservation=reservation, actor=fleet.admin,
                         reason="Budget freeze <until> January", now=NOW)
    [mail] = smtp_server.to(fleet.vision_lead.email)
    assert mail.message["Subject"] == f"Denied: 6 H100-80GB GPUs for Vision (#{reservation.pk})"
    assert "Reason: Budget freeze <until> January" in mail.text()
    assert "Reason: Budget freeze &lt;until&gt; January" in mail.html()


def test_the_lead_is_told_of_an_automatic_denial(db, fleet, admins, smtp_server,
                                                 django_capture_on_commit_callbacks):
    reservation = over_quota_request(fleet, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        reservations_advance(now=reservation.end)
        reservations_advance(now=reservation.end + timedelta(minutes=1))  # idempotent
    [mail] = smtp_server.to(fleet.vision_lead.email)
    assert mail.message["Subject"].startswith("Denied automatically: 6 H100-80GB GPUs")
    assert "Its window passed before an admin decided." in mail.text()


def test_a_rolled_back_decision_mails_nobody(db, fleet, admins, smtp_server,
                                             django_capture_on_commit_callbacks):
    reservation = over_quota_request(fleet, django_capture_on_commit_callbacks)
    before = len(smtp_server.messages)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            reservation_deny(reservation=reservation, actor=fleet.admin, reason="no", now=NOW)
            raise RuntimeError("the caller fails after the service")
    assert len(smtp_server.messages) == before
    assert not MailDelivery.objects.filter(key__endswith=":denied").exists()
