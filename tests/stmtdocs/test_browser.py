"""In a real browser: an admin reviews a month, adjusts a statement, approves them all; a
lead finds the statements on the team page and downloads the PDF. The months are relative
to today (the browser's cookies live on the real clock): two months ago is open for
approval, three months ago is its previous month."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.dispatch import tasks_after_response_wait
from gpuquota.core.timeutil import Period
from reports.late_scan import late_usage_scan
from reports.models import Statement
from reports.services_statements import statements_approve_month
from tests.factories import GpuClassFactory, TeamFactory, make_gpu
from tests.helpers import browser_login, screenshot
from tests.stmtdocs.factories import draft, priced_gpus, reserved_hours

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _months_ago(n: int) -> Period:
    today = timezone.now()
    index = today.year * 12 + today.month - 1 - n
    return Period.month(index // 12, index % 12 + 1)


@pytest.fixture
def org(roles):
    month, before = _months_ago(2), _months_ago(3)
    vision_gpu, speech_gpu = priced_gpus(2)
    reserved_hours(
        roles.team, vision_gpu, before.start + timedelta(days=3), 2, reported_minutes=120
    )
    reserved_hours(roles.team, vision_gpu, month.start + timedelta(days=3), 3, reported_minutes=180)
    reserved_hours(
        roles.other_team, speech_gpu, month.start + timedelta(days=4), 4, reported_minutes=60
    )
    robotics = TeamFactory(name="Robotics", slug="robotics")
    l4 = make_gpu(gpu_class=GpuClassFactory(name="L4"))
    reserved_hours(robotics, l4, month.start + timedelta(days=5), 1, reported_minutes=0)
    draft(before, month, now=timezone.now())
    for user in (roles.admin, roles.lead):
        user.set_password("password")
        user.save()
    return roles, month


def test_admin_reviews_adjusts_and_approves_the_month(org, browser_page, smtp_server):
    roles, month = org
    label = f"{month.start:%Y-%m}"
    page = browser_page
    browser_login(page, "admin")
    page.click("#nav-billing summary")  # the admin pages are in menus
    page.click("#nav-billing >> text=Statements")
    page.fill("#month", label)
    page.click("#month-picker button[type=submit]")
    page.wait_for_url(f"**/statements/review/?month={label}")
    table = page.locator("#review")
    assert "change over 25%" in page.inner_text("#review-vision")
    assert "coverage under 90%" in page.inner_text("#review-speech")
    assert "failed:" in page.inner_text("#review-robotics")
    assert page.inner_text("#approve-all") == "Approve all 2 drafts…"
    screenshot(page, "statements-review")

    table.locator("#review-vision a").first.click()
    page.wait_for_url(f"**/statements/vision/{label}/")
    assert "7.50 USD" in page.inner_text("#total")
    page.fill("#id_amount", "-1.25")
    page.fill("#id_reason", "Goodwill credit for the scheduler outage")
    page.click("#adjust button[type=submit]")
    page.wait_for_selector("text=Adjustment added.")
    assert "6.25 USD" in page.inner_text("#total")
    assert "Goodwill credit" in page.inner_text("#lines")
    screenshot(page, "statements-statement-draft")

    page.goto(f"/statements/review/?month={label}")
    page.click("#approve-all")  # asks first: how many, how much
    question = page.inner_text("#approve-all-question")
    assert question.startswith("Approve 2 statements of ") and "USD?" in question
    assert not Statement.objects.filter(month=month.start.date()).exclude(status="draft")
    screenshot(page, "statements-review-confirm")
    page.click("#approve-all-submit")
    page.wait_for_selector("text=2 statements of")
    assert "Robotics not approved" in page.inner_text(".messages")
    assert "Approved" in page.inner_text("#review-vision")  # mailed after the response
    assert page.locator("#approve-all").count() == 0
    assert page.inner_text("#nothing-to-approve") == "No draft left to approve."
    assert tasks_after_response_wait(timeout_s=60)
    page.reload()
    assert "Sent" in page.inner_text("#review-vision")
    screenshot(page, "statements-review-approved")
    statuses = dict(
        Statement.objects.filter(month=month.start.date()).values_list("team_slug", "status")
    )
    assert statuses == {"vision": "sent", "speech": "sent", "robotics": "draft"}
    assert sorted(smtp_server.recipients()) == ["lead@example.org", "other_lead@example.org"]
    [mail] = smtp_server.to("lead@example.org")
    assert "6.25 USD" in mail.message["Subject"] and len(mail.attachments()) == 2


def test_lead_finds_the_statements_on_the_team_page_and_downloads_the_pdf(org, browser_page):
    roles, month = org
    page = browser_page
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    section = page.locator("#team-statements")
    text = section.inner_text()
    assert f"{month.start:%B %Y}" in text and "7.50" in text and "5.00" in text
    assert "Draft" in text
    section.scroll_into_view_if_needed()
    screenshot(page, "statements-team-section")
    with page.expect_download() as download_info:
        section.locator(f"#statement-{month.start:%Y-%m} >> text=PDF").click()
    download = download_info.value
    assert download.suggested_filename == f"statement-vision-{month.start:%Y-%m}.pdf"
    with open(download.path(), "rb") as pdf:
        assert pdf.read(5) == b"%PDF-"
    page.goto(f"/statements/vision/{month.start:%Y-%m}/")
    assert page.locator("#adjust").count() == 0 and page.locator("#approve").count() == 0
    screenshot(page, "statements-statement-lead")


def test_admin_finds_and_settles_late_usage_of_an_earlier_month(roles, browser_page):
    earlier, month = _months_ago(4), _months_ago(2)
    [gpu] = priced_gpus(1)
    reserved_hours(roles.other_team, gpu, earlier.start + timedelta(days=3), 2, reported_minutes=0)
    draft(earlier, now=timezone.now())
    statements_approve_month(period=earlier, by=roles.admin)
    reserved_hours(roles.other_team, gpu, earlier.start + timedelta(days=5), 3,
                   reported_minutes=0)  # back-filled after approval
    late_usage_scan()
    roles.admin.set_password("password")
    roles.admin.save()
    page = browser_page
    browser_login(page, "admin")
    page.goto(f"/statements/review/?month={month.start:%Y-%m}")
    row = page.locator(f"#earlier-late-speech-{earlier.start:%Y-%m}")
    assert "7.50 USD" in row.inner_text() and "Speech" in row.inner_text()
    row.scroll_into_view_if_needed()
    screenshot(page, "statements-review-earlier-late")

    row.locator("a").click()
    page.wait_for_url(f"**/statements/speech/{earlier.start:%Y-%m}/#late-usage")
    assert page.inner_text("#late-difference") == "7.50"
    page.click("#late-adjust")
    page.wait_for_load_state()
    page.goto(f"/statements/review/?month={month.start:%Y-%m}")
    assert page.locator("#earlier-late").count() == 0
