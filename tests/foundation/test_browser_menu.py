"""The header in a real browser: an admin's menu stays on one line at 1366 px (the admin
pages grouped in menus that open and close like menus), and works at 390 px; the admin's
home page shows what waits for them."""

import pytest

from gpuquota.demo.organisation import demo_organisation_seed
from tests.helpers import browser_login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ONE_LINE = """() => {
  const items = [...document.querySelectorAll('.mainnav > a, .mainnav > details > summary')];
  const tops = new Set(items.map(e => Math.round(e.getBoundingClientRect().top)));
  return {lines: tops.size, items: items.length,
          header: document.querySelector('header.topbar').getBoundingClientRect().height,
          room: document.querySelector('.usermenu').getBoundingClientRect().left
                - Math.max(...items.map(e => e.getBoundingClientRect().right))};
}"""


def test_the_admins_header_is_one_line_with_its_pages_in_menus(browser_page):
    demo_organisation_seed()
    page = browser_page
    browser_login(page, "admin", "demo")
    assert page.locator("#attention").is_visible()
    header = page.evaluate(ONE_LINE)
    assert header["lines"] == 1 and header["header"] < 60, header
    # room for the admin pages other areas add, in their groups or as one more entry
    assert header["room"] > 250, header
    screenshot(page, "foundation-admin-home")

    page.click("#nav-operations summary")
    assert page.locator("#nav-operations .navmenu").is_visible()
    page.click("#nav-billing summary")  # opening one menu closes the other
    assert not page.locator("#nav-operations .navmenu").is_visible()
    screenshot(page, "foundation-admin-menu")
    page.keyboard.press("Escape")
    assert not page.locator("#nav-billing .navmenu").is_visible()
    page.click("#nav-billing summary")
    page.click("#nav-billing >> text=Statements")
    page.wait_for_url("**/statements/review/")
    assert "active" in page.locator("#nav-billing").get_attribute("class")

    page.click("#nav-manage summary")
    page.click("#nav-manage >> text=Overview")
    page.wait_for_url("**/manage/")
    assert page.locator("h1").inner_text() == "Administration"


def test_the_menu_works_on_a_phone(browser_page):
    demo_organisation_seed()
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 800})
    browser_login(page, "admin", "demo")
    page.click("#nav-teams summary")
    page.click("#nav-teams >> text=Speech")
    page.wait_for_url("**/teams/speech/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "foundation-menu-phone")
