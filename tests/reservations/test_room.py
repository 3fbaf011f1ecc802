"""One "free" number: what a team can get within its quota and beyond it, the same in
the grid, the form's hint and the approvals queue, and what approval then does."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuquota.reservations.models import Reservation
from gpuquota.reservations.room import request_room, room_summary, room_verdict
from gpuquota.reservations.selectors import availability, reservations_pending
from gpuquota.reservations.services import NoCapacity, reservation_approve
from tests.reservations.factories import NOW, Fleet

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
S = Reservation.Status


@pytest.fixture
def busy_fleet():
    """8 H100s; vision (quota 4) holds 2 in [NOW+1h, NOW+3h); speech (quota 2) none."""
    fleet = Fleet.create(sizes=(4, 4), vision_quota=4, speech_quota=2)
    fleet.request(count=2)
    return fleet


def _room(fleet, **kwargs):
    return request_room(team=fleet.vision, gpu_class=fleet.gpu_class, start=NOW + H,
                        end=NOW + 3 * H, **kwargs)


def test_within_and_beyond_quota_net_of_other_teams_guarantees(busy_fleet):
    room = _room(busy_fleet)
    assert (room.free_gpus, room.quota_left, room.within_quota) == (6, 2, 2)
    # 6 free less speech's 2 unused guarantee: 4 in all, 2 more than the quota allows
    assert (room.beyond_quota, room.can_get, room.ceiling) == (2, 4, 6)
    speech = request_room(team=busy_fleet.speech, gpu_class=busy_fleet.gpu_class,
                          start=NOW + H, end=NOW + 3 * H)
    # vision's 2 unused count against speech: 6 free − 2
    assert (speech.within_quota, speech.beyond_quota, speech.ceiling) == (2, 2, 4)


@pytest.mark.parametrize(("count", "kind", "status"), [
    (2, "in_quota", S.SCHEDULED),
    (4, "over_quota", S.PENDING),
    (6, "over_quota_blocked", S.PENDING),
    (7, "impossible", None),
])
def test_the_verdict_says_what_submitting_does(busy_fleet, count, kind, status):
    verdict = room_verdict(room=_room(busy_fleet), count=count, team_name="Vision",
                           class_name="H100-80GB")
    assert verdict.kind == kind
    if status is None:
        with pytest.raises(NoCapacity):
            busy_fleet.request(count=count)
        assert "would be refused" in verdict.message
    else:
        assert busy_fleet.request(count=count).status == status


@pytest.mark.parametrize("count", [1, 2, 4, 6, 7])
def test_the_verdict_reads_as_plain_english(busy_fleet, count):
    """No "these 1", no "GPU(s)", no "+2 beyond it", and the count asked said once."""
    room = _room(busy_fleet)
    verdict = room_verdict(room=room, count=count, team_name="Vision", class_name="H100-80GB")
    summary = room_summary(room=room, team_name="Vision")
    for text in (verdict.message, summary):
        assert "GPU(s)" not in text and "these 1" not in text and "+" not in text
        assert " 1 GPUs" not in text and "asked" not in text
    if count == 1:
        assert verdict.message == "1 GPU within quota: it is assigned as soon as you reserve."
    assert summary == ("Vision can have 2 at once within its quota, and up to 2 more with an "
                       "admin's approval.")


def test_a_request_above_the_class_says_what_was_asked_once(busy_fleet):
    with pytest.raises(NoCapacity) as exc:
        busy_fleet.request(count=40)
    assert exc.value.message.count("40") == 1 and "GPU(s)" not in exc.value.message


def test_the_queue_shows_the_number_approval_uses(busy_fleet):
    fits = busy_fleet.request(count=4)  # over quota; 4 can be had
    blocked = busy_fleet.request(count=5, start=NOW + 2 * H, end=NOW + 3 * H)
    rows = {r.pk: r for r in reservations_pending_at(NOW)}
    assert rows[fits.pk].approvable == 4 and rows[fits.pk].quota_gpus == 4
    assert rows[blocked.pk].approvable == 4
    with pytest.raises(NoCapacity) as exc:
        reservation_approve(reservation=blocked, actor=busy_fleet.admin, now=NOW)
    assert "only 4" in exc.value.message
    approved = reservation_approve(reservation=fits, actor=busy_fleet.admin, now=NOW)
    assert approved.assignments.count() == 4
    # what is left for the blocked one: 2 free, and speech still keeps its 2
    assert {r.pk: r for r in reservations_pending_at(NOW)}[blocked.pk].approvable == 0


def reservations_pending_at(now):
    from unittest import mock

    with mock.patch("gpuquota.reservations.selectors.timezone.now", return_value=now):
        return reservations_pending()


def test_queue_queries_do_not_grow_with_the_requests(busy_fleet):
    busy_fleet.request(count=4)
    with CaptureQueriesContext(connection) as few:
        reservations_pending_at(NOW)
    for hour in range(6):
        busy_fleet.request(count=5, start=NOW + (4 + hour) * H, end=NOW + (5 + hour) * H)
        busy_fleet.request(team=busy_fleet.speech, count=3, start=NOW + (4 + hour) * H,
                           end=NOW + (6 + hour) * H)
    with CaptureQueriesContext(connection) as many:
        rows = reservations_pending_at(NOW)
    assert len(rows) == 13
    assert len(many) == len(few)


@pytest.mark.calendar
def test_the_grid_counts_the_same_room_per_day(busy_fleet, clock):
    now = clock.now  # the grid's days and the request's room from one instant
    busy_fleet.request(team=busy_fleet.speech, count=2, start=now + 30 * H,
                       end=now + 80 * H, now=now)
    rows = availability(tz=ZoneInfo("UTC"), days=5, team=busy_fleet.vision)
    cells = rows[0].cells
    tomorrow = cells[1]
    day_start = timezone.datetime.combine(tomorrow.day, timezone.datetime.min.time(),
                                          tzinfo=ZoneInfo("UTC"))
    room = request_room(team=busy_fleet.vision, gpu_class=busy_fleet.gpu_class,
                        start=day_start, end=day_start + 24 * H)
    assert tomorrow.room == room
    assert (cells[2].room.within_quota, cells[2].room.beyond_quota) == (4, 2)  # speech holds 2
    assert availability(tz=ZoneInfo("UTC"), days=5)[0].cells[2].room is None


def test_window_check_tells_the_lead_before_submitting(busy_fleet):
    client = Client()
    client.force_login(busy_fleet.vision_lead)
    start = timezone.localtime(timezone.now() + 30 * H).replace(minute=0, second=0)
    params = {"gpu_class": busy_fleet.gpu_class.pk, "start": start.strftime("%Y-%m-%dT%H:%M"),
              "end": (start + 2 * H).strftime("%Y-%m-%dT%H:%M"), "team": busy_fleet.vision.pk}
    body = client.get("/reservations/window-check/", {**params, "count": 5}).json()
    assert (body["free_gpus"], body["within_quota"], body["beyond_quota"]) == (8, 4, 2)
    assert body["verdict"] == "over_quota"
    assert "will wait for an admin's approval" in body["verdict_message"]
    assert client.get("/reservations/window-check/",
                      {**params, "count": 9}).json()["verdict"] == "impossible"
    assert client.get("/reservations/window-check/",
                      {**params, "count": 3}).json()["verdict"] == "in_quota"
    # a team the user does not lead is refused, not answered
    other = client.get("/reservations/window-check/", {**params, "team": busy_fleet.speech.pk})
    assert other.status_code == 200 and "team" in other.json()["errors"]


def test_grid_fragment_follows_the_team_picked(busy_fleet):
    client = Client()
    client.force_login(busy_fleet.admin)
    page = client.get("/reservations/availability/", {"team": busy_fleet.speech.pk})
    assert page.status_code == 200
    assert "For Speech" in page.content.decode()
    page = client.get("/reservations/availability/", {"team": busy_fleet.vision.pk})
    assert "For Vision" in page.content.decode()
    assert client.get("/reservations/availability/", {"team": "x"}).status_code == 200
    member = Client()
    member.force_login(busy_fleet.vision_lead)
    assert "For Vision" in member.get("/reservations/availability/",
                                      {"team": busy_fleet.speech.pk}).content.decode()


def _page_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_form_grid_and_queue_pages_run_the_same_queries_at_two_sizes(busy_fleet):
    lead, admin = Client(), Client()
    lead.force_login(busy_fleet.vision_lead)
    admin.force_login(busy_fleet.admin)
    # the pages judge windows against the real clock: a pending request ahead of it at both sizes
    now = timezone.now().replace(microsecond=0)
    busy_fleet.request(count=5, start=now + 20 * H, end=now + 22 * H, now=now)  # over quota
    urls = [(lead, "/reservations/new/"), (lead, "/reservations/availability/"),
            (admin, "/reservations/pending/")]
    small = [_page_queries(client, url) for client, url in urls]
    for hour in range(8):
        start = now + (30 + 5 * hour) * H
        busy_fleet.request(count=1, start=start, end=start + 2 * H, now=now)
        busy_fleet.request(team=busy_fleet.speech, count=3, start=start, end=start + H,
                           now=now)
    assert [_page_queries(client, url) for client, url in urls] == small


def test_the_grid_colours_what_the_team_can_have_not_the_fleets_freeness():
    """Every GPU free, but another team's guarantee covers them all: the fleet's grid is
    green, the team's is grey (it can have none), and green again for the guaranteed team."""
    fleet = Fleet.create(sizes=(4, 4), vision_quota=0, speech_quota=8)
    today = datetime(2027, 3, 1).date()
    with time_machine.travel(datetime(2027, 3, 1, 9, 0, tzinfo=UTC), tick=False):
        rows = {team: availability(tz=ZoneInfo("UTC"), days=2, today=today, team=team)
                for team in (None, fleet.vision, fleet.speech)}
    assert [c.level for c in rows[None][0].cells] == ["high", "high"]
    assert [c.level for c in rows[fleet.vision][0].cells] == ["none", "none"]
    assert [c.level for c in rows[fleet.speech][0].cells] == ["high", "high"]
