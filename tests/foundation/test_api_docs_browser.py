"""The API docs as a newcomer opens them: Swagger UI groups the operations by area of the
product (not all under "v1"), and neither page logs an error in the browser's console
(ReDoc's logo on its CDN was refused by the docs' Content-Security-Policy every time)."""

import pytest

from tests.factories import AdminFactory
from tests.helpers import browser_login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_docs_are_grouped_by_area_and_log_no_error(browser_page, live_server):
    AdminFactory(username="docs-admin")
    page = browser_page
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith((live_server.url, "blob:", "data:"))
            else outside.append(r.url))
    browser_login(page, "docs-admin")

    page.goto("/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock-tag", timeout=20_000)
    tags = [t.strip() for t in page.locator(".swagger-ui .opblock-tag").all_inner_texts()]
    names = [t.split("\n")[0].strip() for t in tags]
    assert names[:4] == ["Reservations", "Usage", "Statements", "Reclaim"]
    assert "v1" not in names and {"Agent", "Audit", "Account"} <= set(names)
    screenshot(page, "foundation-api-docs-by-area")

    page.goto("/api/redoc/")
    page.wait_for_selector("[data-section-id]", timeout=20_000)
    page.wait_for_load_state("networkidle")
    assert page.get_by_text("API docs by Redocly").is_visible()  # the link, not its logo
    assert page.locator("label", has_text="Statements").first.is_visible()
    assert errors == [] and outside == []
