import pytest

from gpuquota.demo.organisation import demo_organisation_seed
from tests.helpers import browser_login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_demo_lead_logs_in_and_sees_the_team_page(browser_page):
    demo_organisation_seed()
    page = browser_page
    browser_login(page, "vision-lead", "demo")
    page.wait_for_url("**/teams/vision/")
    assert page.locator("h1").first.inner_text() == "Vision"
    assert page.get_by_text("H100-80GB").first.is_visible()
    screenshot(page, "foundation-team-page")
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/")
