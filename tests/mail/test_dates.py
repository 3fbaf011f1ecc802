"""Mail writes instants as the pages do: `2026-12-01 20:00` in the reader's time zone, the
zone named once (the footer; beside the instant in a subject). A mail and a page that show
the same instant to the same person print the same text."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from reclaim.lifecycle import recommendation_accept
from tests.reclaim.factories import World, make_rec
from tests.reservations.factories import Fleet

pytestmark = pytest.mark.django_db
MAIL_TEMPLATES = Path(settings.BASE_DIR) / "templates" / "mail"


def test_no_mail_template_writes_an_instant_its_own_way():
    own_ways = []
    for path in sorted(MAIL_TEMPLATES.rglob("*.*")):
        for match in re.finditer(r"\|(date|time)(:[^}|]*)?", path.read_text()):
            own_ways.append(f"{path.relative_to(MAIL_TEMPLATES)}: {match.group(0)}")
    assert own_ways == []  # `{% load when %}`: when, when_seconds, day


def test_a_request_waiting_for_approval_shows_the_same_instants_in_the_mail_and_the_queue(
        client, smtp_server, django_capture_on_commit_callbacks):
    fleet = Fleet.create()
    fleet.admin.timezone = "Asia/Tokyo"
    fleet.admin.save()
    with django_capture_on_commit_callbacks(execute=True):
        reservation = fleet.request(count=6, purpose="ablation runs")  # quota is 4
    [mail] = smtp_server.to(fleet.admin.email)
    client.force_login(fleet.admin)
    page = client.get(reverse("reservation_pending")).content.decode()
    start, end = (timezone.localtime(moment, timezone.get_fixed_timezone(9 * 60))
                  for moment in (reservation.start, reservation.end))
    for shown in (f"{start:%Y-%m-%d %H:%M}", f"{end:%Y-%m-%d %H:%M}"):
        assert shown in page and shown in mail.text() and shown in mail.html(), shown
    assert "2026-12-01 20:00" in mail.text()  # NOW + 1 h in Tokyo
    assert "times in Asia/Tokyo" in page
    assert "Times are in your time zone (Asia/Tokyo)" in mail.text()
    assert "Times are in your time zone (Asia/Tokyo)" in mail.html()
    assert " JST" not in mail.text() and "Tue 1 Dec" not in mail.text()


def test_a_reclaim_notice_shows_the_same_instants_as_the_recommendation_page(
        client, smtp_server, django_capture_on_commit_callbacks):
    world = World.create(gpus=4)
    for user in (world.admin, world.lead):
        user.timezone = "America/New_York"
        user.save()
    rec = make_rec(world)
    [row] = rec.gpu_rows.all()
    rec.evidence = {"gpus": {str(row.gpu_id): {"last_busy_at": "2026-12-01T15:04:05+00:00"}}}
    rec.save(update_fields=["evidence"])
    with django_capture_on_commit_callbacks(execute=True):
        recommendation_accept(recommendation=rec, actor=world.admin,
                              now=timezone.now().replace(microsecond=0))
    rec.refresh_from_db()
    [mail] = smtp_server.to(world.lead.email)
    client.force_login(world.admin)
    page = client.get(reverse("reclaim_detail", args=[rec.pk])).content.decode()
    new_york = timezone.localtime(rec.grace_until, timezone.get_fixed_timezone(-5 * 60))
    grace = f"{new_york:%Y-%m-%d %H:%M}"
    last_busy = "2026-12-01 10:04"  # 15:04:05 UTC in New York (EST)
    for shown in (grace, last_busy):
        assert shown in page and shown in mail.text() and shown in mail.html(), shown
    assert mail.message["Subject"].endswith(f"will be released {grace} (America/New_York)")
    assert "Times are in your time zone (America/New_York)" in mail.text()
    assert "2026-12-01T15:04:05" not in mail.text() and " EST" not in mail.text()

