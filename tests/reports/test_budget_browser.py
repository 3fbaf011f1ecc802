"""In a real browser, on the real clock: a lead sees the month to date and its forecast on
the team page, sets a budget and a GPU-hour budget of a class, adds a signed webhook (its
secret shown once) and sends a test that a loopback receiver verifies; a member sees the
figures but no form."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from gpuquota.core.timeutil import Period
from gpuquota.reservations.models import Assignment, Reservation
from reports.models import Budget
from tests.factories import EPOCH, GpuClassFactory, RateCardFactory, make_gpu
from tests.helpers import browser_login, screenshot
from tests.reports.receiver import Receiver, standard_webhooks_verify

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def vision(roles, settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    now = timezone.now()
    month = Period.month(now.year, now.month)
    h100 = GpuClassFactory(name="H100-80GB")
    RateCardFactory(gpu_class=h100, valid_from=EPOCH, reserved_rate=Decimal("2.00"))
    reservation = Reservation.objects.create(
        team=roles.team, gpu_class=h100, count=1, start=month.start, end=month.end,
        status="active", requested_by=roles.lead, requested_at=month.start)
    Assignment.objects.create(reservation=reservation, gpu=make_gpu(gpu_class=h100),
                              assigned_from=month.start, assigned_until=month.end)
    for user in (roles.lead, roles.member):
        user.set_password("password")
        user.save()
    return roles, month


def test_a_lead_sets_a_budget_and_a_channel_on_the_team_page(vision, browser_page):
    roles, month = vision
    receiver = Receiver()
    try:
        page = browser_page
        browser_login(page, "lead")
        page.goto("/teams/vision/")
        forecast = Decimal(month.seconds * 2) / 3600  # the month reserved at 2.00
        assert f"{forecast:,.2f}" in page.locator("#forecast-amount").inner_text()
        assert "booked GPU-hours" in page.locator("#forecast-basis").inner_text()
        assert "none set" in page.locator("#budget-amount").inner_text()
        page.fill("#budget-form input[name=amount]", "100")
        page.fill("#budget-form input[name=thresholds]", "50,90")
        page.click("#budget-save")
        page.wait_for_url("**/teams/vision/#budget")
        assert "100.00 USD" in page.locator("#budget-amount").inner_text()
        assert "% forecast" in page.locator("#budget-used").inner_text()
        budget = Budget.objects.get()
        assert (budget.amount, budget.thresholds) == (Decimal("100.00"), [50, 90])

        page.select_option("#class-hours-form select[name=gpu_class]", "H100-80GB")
        page.fill("#class-hours-form input[name=hours]", "10")
        page.select_option("#class-hours-form select[name=action]", "refuse")
        page.click("#class-hours-save")
        page.wait_for_url("**/teams/vision/#budget")
        row = page.locator("#class-hour-budgets tbody tr").inner_text()
        assert "H100-80GB" in row and "10.00 GPU-hours" in row
        assert "Refuse reservations" in row

        page.select_option("#channel-form select[name=kind]", "webhook")
        page.fill("#channel-form input[name=name]", "ops")
        page.fill("#channel-form input[name=url]", receiver.url + "/hook")
        page.click("#channel-form button[type=submit]")
        secret = page.locator("#channel-secret").inner_text().strip()
        assert secret.startswith("whsec_")
        page.click("text=Back to the team page")
        page.click("#channels button:has-text('Send test')")
        page.wait_for_url("**/teams/vision/#budget")
        assert "Test delivered to ops" in page.content()
        assert "channel.test" in page.locator("#deliveries").inner_text()
        screenshot(page, "team-budget")
        headers, body = receiver.to("/hook")[0]
        assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                        now_s=int(datetime.now(UTC).timestamp()))
        try:  # the reference library's own verify, on the real clock
            from standardwebhooks.webhooks import Webhook
        except ImportError:
            pass
        else:
            assert Webhook(secret).verify(body, headers)["type"] == "channel.test"
    finally:
        receiver.close()

    page.context.clear_cookies()
    browser_login(page, "member")
    page.goto("/teams/vision/")
    assert "100.00 USD" in page.locator("#budget-amount").inner_text()
    assert page.locator("#budget-form").count() == 0 and page.locator("#channels").count() == 0
    assert "10.00 GPU-hours" in page.locator("#class-hour-budgets").inner_text()
    assert page.locator("#class-hours-form").count() == 0
