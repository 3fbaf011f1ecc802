"""In a real browser, on the real clock: a lead chooses the events a team channel hears on
the team page; an admin adds a signed webhook on the admins' channels page with the events
it hears (its secret shown once), sends a test that a loopback receiver verifies, and sees
it in the deliveries; a lead gets no such page; a user adds a channel of their own on
their profile and tests it."""

from datetime import UTC, datetime

import pytest

from reports.channels import channel_add
from reports.models import AdminChannel, TeamChannel, UserChannel
from tests.helpers import browser_login, screenshot
from tests.reports.receiver import Receiver, standard_webhooks_verify

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver(roles, settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    for user in (roles.lead, roles.admin):
        user.set_password("password")
        user.save()
    server = Receiver()
    yield server
    server.close()


def test_a_lead_chooses_the_events_of_a_team_channel(roles, receiver, browser_page):
    channel, _ = channel_add(team=roles.team, kind="slack", name="finance",
                             url=receiver.url + "/finance", by=roles.lead)
    page = browser_page
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    events = page.locator(f"#channel-events-{channel.pk}")
    assert events.inner_text() == "all"
    form = page.locator(f"#channel-events-form-{channel.pk}")
    form.locator("summary").click()
    form.locator("input[value='budget.threshold']").check()
    form.locator("input[value='statement.sent']").check()
    page.click(f"#channel-events-save-{channel.pk}")
    page.wait_for_url("**/teams/vision/#budget")
    assert "finance hears: budget.threshold, statement.sent." in page.content()
    assert events.inner_text() == "budget.threshold, statement.sent"
    screenshot(page, "team-channel-events")
    assert TeamChannel.objects.get().events == ["budget.threshold", "statement.sent"]

    page.goto("/manage/channels/")  # the admins' page is not a lead's
    assert page.locator("#admin-channels").count() == 0


def test_an_admin_adds_tests_and_chooses_an_admins_channel(roles, receiver, browser_page):
    page = browser_page
    browser_login(page, "admin")
    page.goto("/manage/")
    page.click("#area-manage >> text=Admins' channels")
    page.wait_for_url("**/manage/channels/")
    form = page.locator("#channel-form")
    form.locator("select[name=kind]").select_option("webhook")
    form.locator("input[name=name]").fill("ops")
    form.locator("input[name=url]").fill(receiver.url + "/ops")
    form.locator("summary").click()
    form.locator("input[value='node.silent']").check()
    form.locator("input[value='gpu.failed']").check()
    form.locator("button[type=submit]").click()
    secret = page.locator("#channel-secret").inner_text().strip()
    assert secret.startswith("whsec_")
    page.click("text=Back to the admins' channels")
    channel = AdminChannel.objects.get()
    assert channel.events == ["gpu.failed", "node.silent"]
    assert page.locator(f"#channel-events-{channel.pk}").inner_text() == (
        "gpu.failed, node.silent")
    page.click(f"#channel-test-{channel.pk}")
    page.wait_for_url("**/manage/channels/")
    assert "Test delivered to ops" in page.content()
    assert "channel.test" in page.locator("#deliveries").inner_text()
    screenshot(page, "admin-channels")
    headers, body = receiver.to("/ops")[0]
    assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                    now_s=int(datetime.now(UTC).timestamp()))


def test_a_user_adds_their_own_channel_on_their_profile(roles, receiver, browser_page):
    page = browser_page
    browser_login(page, "lead")
    page.goto("/accounts/profile/")
    form = page.locator("#user-channel-form")
    form.locator("select[name=kind]").select_option("slack")
    form.locator("input[name=name]").fill("me")
    form.locator("input[name=url]").fill(receiver.url + "/me")
    form.locator("summary").click()
    form.locator("input[value='job.zero_use_last_warning']").check()
    form.locator("button[type=submit]").click()
    page.click("text=Back to my profile")
    channel = UserChannel.objects.get()
    assert (channel.user, channel.events) == (roles.lead, ["job.zero_use_last_warning"])
    page.click(f"#channel-test-{channel.pk}")
    page.wait_for_url("**/accounts/profile/#my-channels")
    assert "Test delivered to me" in page.content()
    assert "channel.test" in page.locator("#user-deliveries").inner_text()
    screenshot(page, "profile-channels")
    assert receiver.json("/me")[0]["blocks"][0]["text"]["text"] == "gpuquota test for lead"
