"""In a real browser: a member opens My jobs from the navigation, finds the job that held
four GPUs and used one at the top, opens its report (notes, cost, charts), and the team's
lead finds it from the team page. Screenshots in test-artifacts/."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.jobs.services import jobs_refresh
from tests.helpers import browser_login, screenshot
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_member_reads_the_report_of_a_wasteful_job(browser_page):
    now = timezone.now().replace(second=0, microsecond=0)
    world = JobWorld.build()
    for user in (world.member, world.lead):
        user.set_password("password")
        user.save()
    start = now - timedelta(hours=3)
    world.slurm_job("4242", start=start,
                    utils=[[85 if i < 90 else 0 for i in range(120)]] + [[0] * 120] * 3)
    world.slurm_job("4243", start=start + timedelta(minutes=10), utils=[[70] * 60])
    jobs_refresh(now=now)
    page = browser_page

    browser_login(page, "member")
    page.click("nav >> text=My jobs")
    page.wait_for_url("**/jobs/")
    first_row = page.locator("#jobs-list tbody tr").first
    assert "4242" in first_row.inner_text() and "gpus_unused" in first_row.inner_text()
    screenshot(page, "jobs-mine")
    first_row.locator("a", has_text="4242").click()
    page.wait_for_load_state("networkidle")
    assert "This job did not use 3 of the 4 GPUs it held." in page.locator(
        "#note-gpus_unused").inner_text()
    assert "The GPUs sat idle for the last" in page.locator("#note-idle_tail").inner_text()
    assert "24.00 USD" in page.locator("#job-cost").inner_text()
    assert page.locator("svg.chart").count() == 4
    screenshot(page, "jobs-report")
    page.context.clear_cookies()

    browser_login(page, "lead")
    page.goto("/teams/vision/")
    page.click("#team-jobs-line >> text=The team's jobs, worst first")
    page.wait_for_url("**/teams/vision/jobs/")
    assert "member" in page.locator("#team-users").inner_text()
    screenshot(page, "jobs-team")
