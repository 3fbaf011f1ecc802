"""In a real browser: an admin accepts a recommendation, the team's banner tells the
lead, the lead objects, the admin upholds; and a lead's one-step self-release.
Screenshots in test-artifacts/."""

import pytest
from django.core import mail
from django.utils import timezone

from gpuquota.reservations.models import Assignment
from reclaim.models import Recommendation
from tests.factories import RoleMatrix
from tests.helpers import browser_login, screenshot
from tests.reclaimui.factories import policy_settings, reclaim_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


HOURS = 8  # a longer look-back, for charts worth looking at


@pytest.fixture(autouse=True)
def _longer_lookback(settings):
    policy_settings(settings, HOURS)


def confirm_dialogs(page) -> list[str]:
    """Accept every confirm() and remember what it asked."""
    asked: list[str] = []

    def on_dialog(dialog):
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", on_dialog)
    return asked


def test_accept_banner_objection_uphold(browser_page):
    roles = RoleMatrix.create()
    fleet = reclaim_fleet(roles, hours=HOURS)
    rec = fleet.recommendation(fleet.reservations[0])
    page = browser_page
    asked = confirm_dialogs(page)

    browser_login(page, "admin")
    page.click("#nav-operations summary")  # the admin pages are in menus
    page.click("#nav-operations >> text=Reclaim")
    page.wait_for_url("**/reclaim/")
    card = page.locator(f"#rec-{rec.pk}")
    assert "Give back 1 idle GPU" in card.inner_text()
    assert page.locator(".rec").first.get_attribute("data-kind") == "reclaim"
    assert "over quota" in page.locator(".rec").first.inner_text()  # Speech's, ranked first
    assert card.locator("svg.chart.strips rect").count() >= 2 * HOURS
    screenshot(page, "reclaim-review-open")
    # tune the thresholds on the history before accepting anything
    page.fill("#id_days", "1")
    page.fill("#id_lookback_hours", "2")
    page.click("#backtest button[type=submit]")
    page.wait_for_load_state("networkidle")
    result = page.locator("#backtest-result").inner_text()
    vision, speech = fleet.reservations
    assert "look-back 2 h" in result
    assert f"#{vision.pk} vision" in result and f"#{speech.pk} speech" in result
    assert int(page.locator("[data-stat=backtest-recommendations] .value").inner_text()) >= 2
    page.locator("#backtest").screenshot(path="test-artifacts/reclaim-backtest-panel.png")
    card.locator("button", has_text="Accept").click()
    page.wait_for_load_state("networkidle")
    assert f"Recommendation #{rec.pk} accepted" in page.locator(".messages").inner_text()
    assert any("leads of Vision are told" in text for text in asked)
    rec.refresh_from_db()
    assert rec.status == "accepted"
    assert page.locator("#accepted").is_visible() and page.locator(f"#rec-{rec.pk}").is_visible()
    screenshot(page, "reclaim-review-accepted")
    assert [m.to for m in mail.outbox] == [[roles.lead.email]]

    page.context.clear_cookies()
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    banner = page.locator(f"#reclaim-notice-{rec.pk}")
    text = banner.inner_text()
    assert "1 idle GPU of reservation" in text and "vision-node/0" in text
    assert timezone.localtime(rec.grace_until).strftime("%Y-%m-%d %H:%M") in text
    screenshot(page, "reclaim-team-banner-lead")
    banner.locator("input[name=reason]").fill("evaluation job starts tonight")
    banner.locator("button", has_text="Object").click()
    page.wait_for_load_state("networkidle")
    assert "Objection sent" in page.locator(".messages").inner_text()
    assert "Nothing is released until an admin decides" in page.locator(
        f"#reclaim-notice-{rec.pk}").inner_text()
    screenshot(page, "reclaim-team-banner-objected")

    page.context.clear_cookies()
    browser_login(page, "admin")
    page.goto("/reclaim/")
    card = page.locator("#objected + p + section, #objected ~ section").filter(
        has_text="evaluation job starts tonight").first
    assert card.is_visible()
    screenshot(page, "reclaim-review-objection")
    card.locator("input[name=reason]").fill("the node is needed for the deadline")
    card.locator("button", has_text="Uphold").click()
    page.wait_for_load_state("networkidle")
    assert "overruled" in page.locator(".messages").inner_text()
    rec.refresh_from_db()
    assert rec.status == "accepted" and rec.objection_decision == "upheld"
    page.goto(f"/reclaim/{rec.pk}/")
    audit = page.locator(f"#rec-{rec.pk} details.audit").inner_text()
    assert "objection overruled by admin: the node is needed for the deadline" in audit
    assert "objected by lead: evaluation job starts tonight" in audit
    screenshot(page, "reclaim-detail-audit")

    page.context.clear_cookies()
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    text = page.locator(f"#reclaim-notice-{rec.pk}").inner_text()
    assert "an admin upheld it after your objection" in text
    assert "the node is needed for the deadline" in text
    audit = page.locator("#reclaim-audit").inner_text()
    for action in ("recommended", "accepted", "objected", "objection overruled"):
        assert action in audit
    screenshot(page, "reclaim-team-banner-upheld")


def test_lead_releases_idle_gpus_in_one_step(browser_page):
    roles = RoleMatrix.create()
    fleet = reclaim_fleet(roles, hours=HOURS)
    reservation = fleet.reservations[0]
    page = browser_page
    asked = confirm_dialogs(page)
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    row = page.locator(f"#reclaim-idle-{reservation.pk}")
    assert "vision-node/0" in row.inner_text() and "vision-node/1" not in row.inner_text()
    screenshot(page, "reclaim-team-idle-offer")
    row.locator("button", has_text="Release idle GPUs").click()
    page.wait_for_load_state("networkidle")
    assert any("Charges for them stop at once" in text for text in asked)
    assert "1 idle GPU given back" in page.locator(".messages").inner_text()
    assert page.locator(f"#reclaim-idle-{reservation.pk}").count() == 0
    running = Assignment.objects.filter(reservation=reservation,
                                        assigned_until__gt=timezone.now())
    assert [a.gpu.node.hostname + f"/{a.gpu.index}" for a in running] == ["vision-node/1"]
    reservation.refresh_from_db()
    assert reservation.count == 1
    assert Recommendation.objects.get(reservation=reservation).status == "released"
    assert "released by the team" in page.locator("#reclaim-audit").inner_text()
    screenshot(page, "reclaim-team-after-self-release")
    page.goto("/fleet/")
    figures = page.locator("#reclaim-figures")
    assert figures.locator("[data-stat=reclaimed-gpu-hours] .value").inner_text() != "0.0 GPU-h"
    figures.screenshot(path="test-artifacts/reclaim-fleet-figures.png")
