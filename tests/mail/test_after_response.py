"""On the embedded default (no broker), the mail a request causes goes out after its
response: with an SMTP server that holds its answer, an over-quota request and the review
page's "Approve all" answer at once (the browser follows the redirect and reads the next
page meanwhile), and each message is delivered exactly once when the server answers."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from gpuquota.core.dispatch import tasks_after_response_wait
from gpuquota.core.timeutil import Period
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.outbox import mail_send_queued
from gpuquota.reservations.models import Reservation
from reports.models import Statement
from reports.tasks import statements_send_pending_task
from tests.helpers import browser_login, screenshot
from tests.reservations.factories import Fleet
from tests.stmtdocs.factories import draft, priced_gpus, reserved_hours

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _wait_for(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _delivered_once(smtp_server, addresses: list[str]) -> None:
    """Once the server answers, each address gets its message; the sweeps then find
    nothing more to send."""
    smtp_server.holding = False
    _wait_for(lambda: len(smtp_server.messages) == len(addresses), "the held mail")
    tasks_after_response_wait()
    mail_send_queued()
    statements_send_pending_task()
    tasks_after_response_wait()
    assert sorted(smtp_server.recipients()) == sorted(addresses)


@pytest.fixture(autouse=True)
def _patient_sender(smtp_server, settings):
    settings.EMAIL_TIMEOUT = 120  # the sender waits for the held answer as long as we hold it


def test_an_over_quota_request_answers_before_the_smtp_server_does(browser_page, smtp_server):
    fleet = Fleet.create(vision_quota=4, speech_quota=2)
    fleet.vision_lead.set_password("password")
    fleet.vision_lead.save()
    smtp_server.holding = True
    page = browser_page
    browser_login(page, fleet.vision_lead.username)
    page.goto("/reservations/new/")
    page.locator("#availability tbody tr").filter(has_text="H100-80GB").locator("td").nth(5).click()
    page.fill("[name=count]", "6")
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_have_attribute("data-verdict", "over_quota")
    page.fill("[name=purpose]", "big sweep")
    page.click("#reservation-form button[type=submit]")
    page.wait_for_url("**/teams/vision/")  # today's page, while the server holds the mail
    assert "is over Vision's quota" in page.locator(".messages").inner_text()
    screenshot(page, "mail-after-response-request")
    _wait_for(lambda: smtp_server.held == 1, "the admin's mail to reach the server")
    assert smtp_server.messages == []
    assert Reservation.objects.get(purpose="big sweep").status == "pending"

    _delivered_once(smtp_server, [fleet.admin.email])
    delivery = MailDelivery.objects.get(recipient=fleet.admin)
    assert (delivery.status, delivery.attempts) == ("sent", 1)


def _months_ago(n: int) -> Period:
    today = timezone.now()  # the browser's cookies live on the real clock
    index = today.year * 12 + today.month - 1 - n
    return Period.month(index // 12, index % 12 + 1)


def test_approve_all_answers_before_the_smtp_server_does(roles, browser_page, smtp_server):
    month = _months_ago(2)
    vision_gpu, speech_gpu = priced_gpus(2)
    reserved_hours(roles.team, vision_gpu, month.start + timedelta(days=3), 3,
                   reported_minutes=180)
    reserved_hours(roles.other_team, speech_gpu, month.start + timedelta(days=4), 4,
                   reported_minutes=60)
    draft(month, now=timezone.now())
    roles.admin.set_password("password")
    roles.admin.save()
    smtp_server.holding = True
    page = browser_page
    browser_login(page, "admin")
    page.goto(f"/statements/review/?month={month.start:%Y-%m}")
    page.click("#approve-all")
    page.click("#approve-all-submit")
    page.wait_for_selector("text=2 statements of")  # the review page, mail still held
    assert "Approved" in page.inner_text("#review-vision")
    screenshot(page, "mail-after-response-approve-all")
    _wait_for(lambda: smtp_server.held == 1, "the first statement to reach the server")
    assert smtp_server.messages == []

    _delivered_once(smtp_server, [roles.lead.email, roles.other_lead.email])
    assert set(Statement.objects.values_list("status", flat=True)) == {"sent"}
    assert set(MailDelivery.objects.values_list("status", "attempts")) == {("sent", 1)}
