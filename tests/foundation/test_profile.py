"""The profile page as a newcomer uses it: a new API token appears at the top of the page,
in view, with a button that copies it; the time zone list offers the zones of real places
(grouped by region, UTC first), not the system's aliases such as `localtime`."""

import pytest
from django.test import Client

from accounts.forms import ProfileForm, timezone_choices
from tests.factories import UserFactory
from tests.helpers import browser_login, screenshot


def _zones(choices) -> list[str]:
    return [value for value, label in choices if isinstance(label, str)] + [
        value for _region, names in choices if isinstance(names, list) for value, _l in names]


def test_the_time_zone_list_has_places_not_system_aliases():
    zones = _zones(timezone_choices())
    assert zones[0] == "UTC"
    assert {"Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Auckland"} <= set(zones)
    for alias in ("localtime", "posixrules", "Factory", "Etc/GMT+5", "US/Pacific", "GB", "Zulu"):
        assert alias not in zones, alias
    regions = [label for _value, label in timezone_choices() if isinstance(label, list)]
    assert regions  # grouped by region
    assert [region for region, _names in timezone_choices()[1:]][:2] == ["Africa", "America"]


@pytest.mark.django_db
def test_a_profile_in_a_legacy_zone_still_saves_and_localtime_is_refused():
    user = UserFactory(timezone="US/Pacific")
    client = Client()
    client.force_login(user)
    data = {"first_name": "A", "last_name": "B", "email": "a@example.org"}
    assert client.post("/accounts/profile/", {**data, "timezone": "US/Pacific"}).status_code == 302
    refused = client.post("/accounts/profile/", {**data, "timezone": "localtime"})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    user.refresh_from_db()
    assert user.timezone == "US/Pacific"
    assert "localtime" not in _zones(ProfileForm(instance=user).fields["timezone"].choices)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_new_token_is_in_view_with_a_copy_button(browser_page):
    UserFactory(username="newcomer")
    page = browser_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    browser_login(page, "newcomer")
    page.goto("/accounts/profile/")
    page.fill("#id_name", "nightly CI")
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#new-token")
    key = page.inner_text("#new-token-key").strip()
    assert key.startswith("gqu_")
    box = page.locator("#new-token").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 900  # above the fold at 1366×900
    page.click("#copy-token")
    assert page.evaluate("navigator.clipboard.readText()") == key
    assert page.inner_text("#copy-token") == "Copied"
    screenshot(page, "foundation-profile-new-token")
    options = page.locator("#id_timezone option").all_inner_texts()
    assert "localtime" not in options and options[0] == "UTC"
