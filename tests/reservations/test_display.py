"""How reservations read: their effective end after a release, everywhere they are
listed, and dates with the year when it is not the current one."""

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.test import Client
from django.utils import timezone

from gpuquota.reservations.services import reservation_release
from tests.reservations.factories import Fleet

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def _render(text: str, **context) -> str:
    return Template("{% load when %}" + text).render(Context(context))


def test_one_format_for_every_instant_in_the_viewers_time_zone():
    instant = datetime(2030, 1, 1, 9, 0, 5, tzinfo=UTC)
    assert _render("{{ t|when }}", t=instant) == "2030-01-01 09:00"
    assert _render("{{ t|when_seconds }}", t=instant) == "2030-01-01 09:00:05"
    with timezone.override("Asia/Tokyo"):
        assert _render("{{ t|when }}", t=instant) == "2030-01-01 18:00"
    assert _render("{{ t|day }}", t=datetime(2030, 1, 1).date()) == "2030-01-01"
    assert _render("{{ t|when:'open' }}", t=None) == "open"


def test_after_a_release_every_table_shows_the_effective_end():
    fleet = Fleet.create()
    now = timezone.now().replace(microsecond=0)
    start = now - 2 * H
    reservation = fleet.request(count=1, start=start, end=now + 10 * H, by=fleet.admin, now=now)
    released = reservation_release(reservation=reservation, actor=fleet.vision_lead, now=now)
    client = Client()
    client.force_login(fleet.vision_lead)
    page = client.get("/teams/vision/").content.decode()
    effective = timezone.localtime(now).strftime("%Y-%m-%d %H:%M")
    booked = timezone.localtime(released.end).strftime("%Y-%m-%d %H:%M")
    assert f'data-effective-end="{now.isoformat()}"' in page
    usage_table = page[page.index('id="reservation-utilization"'):]
    assert effective in usage_table and "<s class=\"muted\" title=\"Booked end\">" in usage_table
    assert booked in usage_table  # the booked end, struck through


def test_the_api_gives_the_effective_end():
    fleet = Fleet.create()
    now = timezone.now().replace(microsecond=0)
    reservation = fleet.request(count=1, start=now - 2 * H, end=now + 10 * H, by=fleet.admin,
                                now=now)
    client = Client()
    client.force_login(fleet.vision_lead)
    before = client.get(f"/api/v1/reservations/{reservation.pk}").json()
    assert before["effective_end"] == before["end"]
    reservation_release(reservation=reservation, actor=fleet.vision_lead, now=now)
    after = client.get(f"/api/v1/reservations/{reservation.pk}").json()
    listed = client.get("/api/v1/reservations").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert after["effective_end"] != after["end"]
    assert after["effective_end"].startswith(timezone.localtime(now).strftime("%Y-%m-%dT%H:%M"))
    assert [r["effective_end"] for r in rows if r["id"] == reservation.pk] == \
        [after["effective_end"]]
