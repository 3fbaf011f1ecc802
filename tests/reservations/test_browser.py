"""In a real browser: a lead reserves GPUs; an admin approves a pending request."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu
from tests.helpers import browser_login, screenshot
from tests.reservations.factories import Fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def org():
    fleet = Fleet.create(sizes=(4, 4), vision_quota=4, speech_quota=2)
    l4 = GpuClassFactory(name="L4")
    node = NodeFactory(hostname="l4-node-00")
    for i in range(8):
        make_gpu(node=node, gpu_class=l4, index=i)
    QuotaFactory(team=fleet.vision, gpu_class=l4, gpus=2)
    fleet.vision_lead.timezone = "Europe/Berlin"
    fleet.vision_lead.set_password("password")
    fleet.vision_lead.save()
    fleet.admin.set_password("password")
    fleet.admin.save()
    now = timezone.now().replace(microsecond=0)
    # some existing bookings so the availability grid has colour
    reservation_create(team=fleet.speech, gpu_class=fleet.gpu_class, count=2,
                       start=now + timedelta(hours=1), end=now + timedelta(days=4),
                       requested_by=fleet.speech_lead)
    reservation_create(team=fleet.vision, gpu_class=fleet.gpu_class, count=2, start=now,
                       end=now + timedelta(days=2), requested_by=fleet.vision_lead,
                       purpose="baseline training")
    return fleet


def test_lead_reads_availability_reserves_two_gpus_and_sees_them(org, browser_page):
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/reservations/new/")
    grid = page.locator("#availability")
    assert grid.is_visible()
    assert "H100-80GB" in grid.inner_text() and "L4" in grid.inner_text()
    screenshot(page, "reservations-form-availability")
    # pick H100 on the 6th day from the grid, then ask for 2 GPUs
    page.locator("#availability tbody tr").filter(has_text="H100-80GB").locator("td").nth(5).click()
    assert page.input_value("[name=start]").endswith(" 00:00")  # as the pages write times
    page.fill("[name=count]", "2")
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_contain_text("free for this whole")
    assert "of 8 H100-80GB GPUs are free" in page.inner_text("#window-hint")
    page.fill("[name=purpose]", "ablation runs")
    screenshot(page, "reservations-form-filled")
    page.click("#reservation-form button[type=submit]")
    page.wait_for_url("**/teams/vision/")
    body = page.locator("main").inner_text()
    assert "Reservation #" in body and "ablation runs" in body
    reservation = Reservation.objects.get(purpose="ablation runs")
    assert reservation.status == "scheduled" and reservation.count == 2
    chips = page.locator(f"#reservation-{reservation.pk} .gpu-chip")
    assert chips.count() == 2
    assert "h100-80gb-node" in chips.first.inner_text()
    screenshot(page, "reservations-team-page-lead")


def test_lead_gets_a_clear_message_for_a_dst_gap(org, browser_page):
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/reservations/new/")
    page.fill("[name=count]", "1")
    page.fill("[name=start]", "2027-03-28T02:30")
    page.fill("[name=end]", "2027-03-28T10:00")
    page.click("#reservation-form button[type=submit]")
    assert "does not exist in Europe/Berlin" in page.locator("#start-errors").inner_text()
    screenshot(page, "reservations-form-dst-error")


def test_admin_approves_a_pending_request(org, browser_page):
    now = timezone.now().replace(microsecond=0)
    pending = reservation_create(team=org.vision, gpu_class=org.gpu_class, count=5,
                                 start=now + timedelta(days=5), end=now + timedelta(days=6),
                                 requested_by=org.vision_lead, purpose="big sweep")
    assert pending.status == "pending"
    page = browser_page
    browser_login(page, org.admin.username)
    page.goto("/reservations/pending/")
    row = page.locator(f"#pending-{pending.pk}")
    assert "big sweep" in row.inner_text()
    screenshot(page, "reservations-admin-queue")
    row.locator("input[name=reason]").fill("deadline next week")
    row.locator("button[value=approve]").click()
    page.wait_for_load_state("networkidle")
    assert f"Request #{pending.pk} approved" in page.locator(".messages").inner_text()
    pending.refresh_from_db()
    assert pending.status == "scheduled" and pending.assignments.count() == 5
    page.goto("/teams/vision/")
    assert page.locator(f"#reservation-{pending.pk} .gpu-chip").count() == 5
    screenshot(page, "reservations-team-page-admin")


def test_lead_is_warned_before_an_over_quota_request_and_sees_the_same_numbers_as_the_admin(
        org, browser_page):
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/reservations/new/")
    # day 6: nothing booked; vision's quota is 4, speech's unused guarantee 2 of 8
    cell = page.locator("#availability tbody tr").filter(has_text="H100-80GB").locator("td").nth(5)
    assert cell.inner_text().replace("\n", "") == "4+2"
    assert "4 within Vision's quota, 2 more beyond it" in cell.get_attribute("title")
    cell.click()
    page.fill("[name=count]", "6")
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_have_attribute("data-verdict", "over_quota")
    hint = page.inner_text("#window-hint")
    assert ("Vision can have 4 at once within its quota, and up to 2 more with an admin's "
            "approval.") in hint
    assert "A request for 6 goes beyond Vision's quota: it will wait for an admin's approval" \
        in hint
    assert page.inner_text("#reservation-form button[type=submit]") == "Request approval"
    screenshot(page, "reservations-form-over-quota-warning")
    page.fill("[name=count]", "7")
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_have_attribute("data-verdict", "impossible")
    assert page.inner_text("#reservation-form button[type=submit]") == "Reserve"
    page.fill("[name=count]", "6")
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_have_attribute("data-verdict", "over_quota")
    page.fill("[name=purpose]", "big sweep")
    page.click("#reservation-form button[type=submit]")
    page.wait_for_url("**/teams/vision/")
    assert "is over Vision's quota" in page.locator(".messages").inner_text()
    pending = Reservation.objects.get(purpose="big sweep")
    assert pending.status == "pending" and pending.count == 6
    page.context.clear_cookies()
    browser_login(page, org.admin.username)
    page.goto("/reservations/pending/")
    row = page.locator(f"#pending-{pending.pk}")
    assert row.locator(".approvable").get_attribute("data-approvable") == "6"
    assert "4 in quota · +2 beyond" in row.locator(".approvable").inner_text()
    screenshot(page, "reservations-admin-queue-same-numbers")
    row.locator("button[value=approve]").click()
    page.wait_for_load_state("networkidle")
    assert f"Request #{pending.pk} approved" in page.locator(".messages").inner_text()
    pending.refresh_from_db()
    assert pending.assignments.count() == 6


def test_an_impossible_request_is_refused_at_once_in_the_form(org, browser_page):
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/reservations/new/")
    page.locator("#availability tbody tr").filter(has_text="H100-80GB").locator("td").nth(6).click()
    page.fill("[name=count]", "7")  # 8 in service, 2 guaranteed to speech
    page.locator("[name=count]").dispatch_event("change")
    expect(page.locator("#window-hint")).to_have_attribute("data-verdict", "impossible")
    page.click("#reservation-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "leave Vision at most 6 H100-80GB GPUs" in page.locator("#count-errors").inner_text()
    assert not Reservation.objects.filter(count=7).exists()
    screenshot(page, "reservations-form-impossible")


def test_a_form_sent_again_after_its_answer_was_lost_reserves_once(org, browser_page):
    """The browser sends the filled form twice at once, as a double click or a resend after
    a lost answer does: one reservation; the page says the second did nothing."""
    page = browser_page
    browser_login(page, org.vision_lead.username)
    page.goto("/reservations/new/")
    start = timezone.localtime(timezone.now() + timedelta(days=3), ZoneInfo("Europe/Berlin"))
    page.fill("[name=count]", "1")
    page.fill("[name=start]", f"{start:%Y-%m-%d} 09:00")
    page.fill("[name=end]", f"{start:%Y-%m-%d} 17:00")
    page.fill("[name=purpose]", "sent twice")
    statuses = page.evaluate("""async () => {
        const form = document.querySelector('#reservation-form');
        const send = () => fetch(location.href, {method: 'POST', body: new FormData(form),
                                                 redirect: 'manual'});
        return (await Promise.all([send(), send()])).map(r => r.type);
    }""")
    assert statuses == ["opaqueredirect", "opaqueredirect"]  # both answered with the redirect
    assert Reservation.objects.filter(purpose="sent twice").count() == 1
    # Which of two concurrent answers sets the session's messages last is the browser's
    # race; a resend once both were answered is not: it says it did nothing.
    page.evaluate("""async () => {
        const form = document.querySelector('#reservation-form');
        await fetch(location.href, {method: 'POST', body: new FormData(form), redirect: 'manual'});
    }""")
    assert Reservation.objects.filter(purpose="sent twice").count() == 1
    page.goto("/teams/vision/")
    assert "This form was already sent; nothing was done twice." in page.inner_text(".messages")
