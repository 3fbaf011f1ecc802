"""In a real browser: an admin manages quotas and rate cards in the product, lists every
reservation; the glossary, utilization and 404 pages as users see them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.reservations.models import Quota
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import RateCardFactory
from tests.helpers import browser_login, screenshot
from tests.reservations.factories import Fleet
from tests.usage.factories import minute_samples, reserve

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org():
    fleet = Fleet.create(sizes=(4, 4), vision_quota=4, speech_quota=2)
    RateCardFactory(gpu_class=fleet.gpu_class)
    for user in (fleet.admin, fleet.vision_lead):
        user.set_password("password")
        user.save()
    now = timezone.now().replace(microsecond=0)
    fleet.request(count=2, start=now + timedelta(hours=1), end=now + timedelta(days=1), now=now)
    fleet.request(team=fleet.speech, count=3, start=now + timedelta(hours=2),
                  end=now + timedelta(days=2), now=now)
    return fleet


def test_admin_ends_a_quota_and_adds_the_next_row_in_the_product(org, browser_page):
    page = browser_page
    browser_login(page, org.admin.username)
    page.click("#nav-manage summary")  # the admin pages are in menus
    page.click("#nav-manage >> text=Quotas")
    page.wait_for_url("**/manage/quotas/")
    row = org.vision.quotas.get()
    later = timezone.localtime(timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    page.fill(f"#quota-{row.pk} input[name=at]", later)
    page.fill(f"#quota-{row.pk} input[name=reason]", "reorg")
    page.click(f"#quota-{row.pk} button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "quota row updated" in page.inner_text(".messages")
    page.select_option("#create-form [name=team]", label="Vision")
    page.fill("#create-form [name=gpus]", "6")
    page.fill("#create-form [name=valid_from]", later)
    page.click("#create-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Quota row added." in page.inner_text(".messages")
    assert Quota.objects.filter(team=org.vision).count() == 2
    assert "upcoming" in page.inner_text("#quotas")
    screenshot(page, "manage-quotas")
    page.click(".tabs >> text=Rate cards")
    page.wait_for_url("**/manage/rate-cards/")
    page.fill("#create-form [name=reserved_rate]", "3.00")
    page.fill("#create-form [name=on_demand_rate]", "3.50")
    page.fill("#create-form [name=valid_from]", later)
    page.click("#create-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "Overlaps the H100-80GB rate card" in page.inner_text("#create-form")
    screenshot(page, "manage-rate-cards-refused")
    page.click(".tabs >> text=All reservations")
    page.select_option("#filters [name=team]", label="Speech")
    page.click("#filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.locator("#all-reservations tbody tr").count() == 1
    screenshot(page, "manage-all-reservations")


def test_glossary_utilization_and_404_pages(org, browser_page):
    now = timezone.now().replace(second=0, microsecond=0)
    reserve(org.vision, org.gpus[-1], now - timedelta(hours=2), now)  # so the charts have bars
    minute_samples(org.gpus[-1], now - timedelta(hours=2), 45, util=70)
    dirty_hours_process()
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/fleet/utilization/")
    assert page.locator("#fleet-daily-chart svg").is_visible()
    screenshot(page, "utilization-per-day-charts")
    page.goto("/fleet/utilization/?last=24h")  # the month to date may not hold both hours
    assert "busy 0.75 h of 2.00 reserved h" in page.inner_text("body")
    page.goto("/fleet/utilization/")
    page.click("text=what the figures mean")
    page.wait_for_url("**/fleet/glossary/")
    assert "busy threshold, 5%" in page.inner_text(".glossary")
    screenshot(page, "glossary")
    response = page.goto("/teams/no-such-team/")
    assert response.status == 404
    assert "Page not found" in page.inner_text("main")
    screenshot(page, "page-404")
