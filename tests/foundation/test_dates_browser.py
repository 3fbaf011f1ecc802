"""One date format on every page, in the viewer's time zone: `2026-12-01 16:00` (with
seconds only for events), never `Tue 01 Dec 16:00`, `12-02 00:00` or a time "UTC" beside
the others, and the date-and-time inputs (Extend...) show and take the same, not the
browser's locale."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from accounts.models import User
from reports.models import Statement
from tests.helpers import browser_login, screenshot
from tests.reclaim.factories import World, make_rec

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TOKYO = ZoneInfo("Asia/Tokyo")
WEEKDAY_FIRST = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{1,2} (Jan|Feb|Mar|Apr|May|Jun|"
                           r"Jul|Aug|Sep|Oct|Nov|Dec)\b")
NO_YEAR = re.compile(r"(?<![\d-])\d{2}-\d{2} \d{2}:\d{2}")
TIME_IN_UTC = re.compile(r"\d{2}:\d{2}(:\d{2})? UTC")
TEXT = """() => document.body.innerText + '\\n' +
  [...document.querySelectorAll('svg text, svg title, [title]')].map(
    e => (e.textContent || '') + ' ' + (e.getAttribute('title') || '')).join('\\n')"""


def _local(instant) -> str:
    return timezone.localtime(instant, TOKYO).strftime("%Y-%m-%d %H:%M")


def test_every_page_shows_instants_one_way_in_the_viewers_zone(browser_page):
    world = World.create(gpus=4)
    User.objects.filter(username__in=["admin", "lead"]).update(timezone="Asia/Tokyo")
    rec = make_rec(world)
    reservation = rec.reservation
    now = timezone.now().replace(microsecond=0)
    last_month = (now.replace(day=1) - timedelta(days=1)).replace(day=1)
    Statement.objects.create(team=world.team, month=last_month.date(), total="10.00",
                             currency="USD", team_name="Vision", team_slug="vision",
                             computed_at=now, computed_until=now.replace(day=1))
    page = browser_page
    browser_login(page, "admin")
    pages = {
        "/teams/vision/": [reservation.start, reservation.end],
        "/reclaim/": [reservation.start, rec.window_start],
        f"/reclaim/{rec.pk}/": [rec.window_end],
        f"/statements/vision/{last_month:%Y-%m}/": [],
        "/fleet/utilization/": [],
        "/accounts/profile/": [],
    }
    for path, instants in pages.items():
        page.goto(path)
        text = page.evaluate(TEXT)
        for pattern in (WEEKDAY_FIRST, NO_YEAR, TIME_IN_UTC):
            assert not pattern.search(text), (path, pattern.pattern, pattern.findall(text)[:3])
        for instant in instants:
            assert _local(instant) in text, (path, _local(instant))
    page.goto("/teams/vision/")
    extend = page.locator(f"form[action='/reservations/{reservation.pk}/extend/'] input[name=end]")
    assert extend.input_value() == _local(reservation.end)  # not 12/03/2026, 09:00 PM
    later = (reservation.end + timedelta(hours=1)).replace(second=0)
    extend.fill(_local(later))
    page.locator(f"form[action='/reservations/{reservation.pk}/extend/'] button").click()
    page.wait_for_load_state("networkidle")
    assert f"now ends {_local(later)}" in page.locator(".messages").inner_text()
    reservation.refresh_from_db()
    assert reservation.end == later
    screenshot(page, "foundation-dates-team-page-tokyo")
