"""In the browser: a user creates a personal token on the profile page and a script
uses it with `Authorization: Bearer`; the API docs render with the network blocked;
the lockout message on the login page."""

import json
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest

from tests.factories import AdminFactory, TeamFactory, UserFactory
from tests.helpers import browser_login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _script_get(url: str, key: str) -> tuple[int, dict]:
    """What a script would do: a plain HTTP request with the token, no browser session."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as refusal:
        return refusal.code, json.load(refusal)


def test_a_user_creates_a_token_and_a_script_uses_it(browser_page, live_server):
    UserFactory(username="scripter")
    TeamFactory(slug="vision", name="Vision")
    page = browser_page
    browser_login(page, "scripter")
    page.goto("/accounts/profile/")
    page.fill("#id_name", "laptop script")
    page.click("#token-form button[type=submit]")
    key = page.locator("#new-token-key").inner_text().strip()
    assert key.startswith("gqu_")
    assert page.locator("#token-list").get_by_text("laptop script").is_visible()
    screenshot(page, "hardening-profile-token-created")

    status, me = _script_get(f"{live_server.url}/api/v1/me", key)
    assert status == 200 and me["username"] == "scripter"
    page.reload()
    assert page.locator("#new-token-key").count() == 0  # shown once
    last_used = page.locator("#token-list tbody tr").first.locator("td").nth(3)
    assert last_used.inner_text() != "never"

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#token-list button:has-text('Revoke')")
    page.wait_for_load_state("networkidle")
    assert page.locator("#token-list").get_by_text("revoked").is_visible()
    status, refusal = _script_get(f"{live_server.url}/api/v1/me", key)
    assert status == 401 and "revoked" in refusal["detail"]
    screenshot(page, "hardening-profile-token-revoked")


def _block_the_network(page, live_url: str) -> list[str]:
    """Abort every request that does not go to the live server; the aborted URLs."""
    live = urlparse(live_url).netloc
    blocked: list[str] = []

    def route(request_route):
        if urlparse(request_route.request.url).netloc == live:
            request_route.continue_()
        else:
            blocked.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    return blocked


def test_the_api_docs_render_offline(browser_page, live_server):
    AdminFactory(username="docs-admin")
    page = browser_page
    blocked = _block_the_network(page, live_server.url)
    browser_login(page, "docs-admin")
    page.goto("/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20_000)
    assert page.locator(".swagger-ui .opblock").count() >= 15
    screenshot(page, "hardening-api-docs-offline")
    page.goto("/api/redoc/")
    page.wait_for_selector("[data-section-id]", timeout=20_000)
    assert page.get_by_text("gpuquota API").first.is_visible()
    screenshot(page, "hardening-api-redoc-offline")
    assert blocked == []  # nothing even tried to leave the machine


def test_the_login_page_says_why_it_is_locked(browser_page, settings):
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="forgetful")
    page = browser_page
    for _ in range(3):
        browser_login(page, "forgetful", "wrong")
    browser_login(page, "forgetful")
    assert page.get_by_text("Too many failed logins").is_visible()
    screenshot(page, "hardening-login-locked")
