"""In a real browser: the policy lends an idle GPU, the admin finds it in the pool through
the Operations menu, the lead presses "Return now" (confirming), and the samples show the
GPU free. Screenshots in test-artifacts/."""

import pytest
from django.utils import timezone

from gpuquota.lending.scan import lending_scan
from gpuquota.reservations.models import Loan
from tests.helpers import browser_login, screenshot
from tests.lending.factories import BORROWER_USER, IDLE, MIN, World, held_gpus, samples

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def confirm_dialogs(page) -> list[str]:
    asked: list[str] = []

    def on_dialog(dialog):
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", on_dialog)
    return asked


def test_a_lead_returns_a_lent_gpu_now(browser_page, settings):
    settings.LEND_AFTER_IDLE_S = int(IDLE.total_seconds())
    now = timezone.now().replace(second=0, microsecond=0)
    world = World.create()
    for user in (world.admin, world.lead):
        user.set_password("password")
        user.save()
    [gpu] = held_gpus(world.reserve(count=1, start=now - 2 * IDLE, end=now + 10 * IDLE))
    samples(gpu, start=now - IDLE, end=now, util=0)
    assert lending_scan(now=now)["lent"] == 1
    samples(gpu, start=now, end=now + MIN, util=90, users=(BORROWER_USER,))
    page = browser_page
    asked = confirm_dialogs(page)

    browser_login(page, "admin")
    page.click("#nav-operations summary")
    page.click("#nav-operations >> text=Lending")
    page.wait_for_url("**/lending/")
    assert "h100-node-00/0" in page.locator("#lending-pool").inner_text()
    screenshot(page, "lending-admin-pool")
    page.context.clear_cookies()

    browser_login(page, "lead")
    page.goto("/teams/vision/")
    row = page.locator("#lent-gpus")
    assert "lent" in row.inner_text()
    row.locator("button", has_text="Return now").click()
    page.wait_for_load_state("networkidle")
    assert asked and asked[-1].startswith("Return h100-node-00/0 now?")
    assert "is coming back" in page.content()
    assert "returning" in page.locator("#lent-gpus").inner_text()
    screenshot(page, "lending-team-returned")
    loan = Loan.objects.get()
    assert loan.end_reason == "owner_ask" and loan.returned_by == world.lead
    samples(gpu, start=now + MIN, end=now + 2 * MIN, util=0)
    lending_scan(now=now + 2 * MIN)
    loan.refresh_from_db()
    assert loan.freed_at == max(now + MIN, loan.returned_at)
    page.reload()
    assert page.locator("#lent-gpus").count() == 0
