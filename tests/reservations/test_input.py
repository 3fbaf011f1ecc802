"""Bad input: a 400 naming the field (API) or a form message (UI); nothing stored."""

import html
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from gpuquota.core.forms import local_to_aware
from gpuquota.reservations import services
from gpuquota.reservations.models import Reservation
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(roles):
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory(hostname="h100-a")
    for i in range(2):
        make_gpu(node=node, gpu_class=gpu_class, index=i)
    QuotaFactory(team=roles.team, gpu_class=gpu_class, gpus=2)
    client = Client()
    client.force_login(roles.lead)
    return roles, client


def _soon(days=1):
    return timezone.now().replace(microsecond=0) + timedelta(days=days)


def _post(client, **overrides):
    start = _soon()
    payload = {
        "team": "vision",
        "gpu_class": "H100-80GB",
        "count": 1,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=2)).isoformat(),
    }
    payload.update(overrides)
    return client.post("/api/v1/reservations", payload, content_type="application/json")


BAD_INPUT = [
    (
        {"end": _soon().isoformat(), "start": (_soon() + timedelta(hours=1)).isoformat()},
        "end",
        "after the start",
    ),
    ({"count": 0}, "count", "at least 1"),
    ({"count": -3}, "count", "at least 1"),
    ({"count": 10**6}, "count", "At most"),
    ({"count": "two"}, "count", "integer"),
    ({"gpu_class": "B200"}, "gpu_class", "does not exist"),
    ({"start": (timezone.now() - timedelta(hours=2)).isoformat()}, "start", "past"),
    ({"start": "2026-12-01T09:00:00"}, "start", "offset or Z"),
    ({"end": "2026-12-01 09:00"}, "end", "offset or Z"),
    ({"start": "tomorrow"}, "start", "format"),
    ({"placement": "rack"}, "placement", "valid choice"),
    ({"end": (_soon() + timedelta(days=500)).isoformat()}, "end", "366 days"),
]


def test_api_unknown_team_is_a_404_like_a_hidden_one(setup):
    _roles, client = setup
    response = _post(client, team="nope")
    assert response.status_code == 404
    assert response.json()["errors"][0]["field"] == "team"
    assert not Reservation.objects.filter(requested_by=_roles.lead).exists()


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    BAD_INPUT,
)
def test_api_bad_input_is_a_400_naming_the_field(setup, overrides, field, words):
    _roles, client = setup
    response = _post(client, **overrides)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert body["errors"][0]["field"] == field
    assert words.lower() in body["errors"][0]["message"].lower()
    assert (
        not Reservation.objects.filter(requested_by=_roles.lead, count__gt=0)
        .exclude(start__lt=timezone.now())
        .exists()
    )


def test_api_no_capacity_is_a_409_with_free_count(setup):
    _roles, client = setup
    start = _soon()
    assert (
        _post(
            client, count=2, start=start.isoformat(), end=(start + timedelta(hours=2)).isoformat()
        ).status_code
        == 201
    )
    response = _post(
        client, count=1, start=start.isoformat(), end=(start + timedelta(hours=2)).isoformat()
    )
    # over quota now (2 held): pending, not an error
    assert response.status_code == 201 and response.json()["status"] == "pending"
    _roles.team.quotas.update(gpus=3)
    response = _post(
        client, count=1, start=start.isoformat(), end=(start + timedelta(hours=2)).isoformat()
    )
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "no_capacity" and body["errors"][0]["field"] == "count"
    assert "0 H100-80GB GPU(s) free" in body["detail"]


def test_api_bad_extend_and_deny(setup):
    roles, client = setup
    created = _post(client).json()
    response = client.post(
        f"/api/v1/reservations/{created['id']}/extend",
        {"end": "2027-01-01T00:00:00"},
        content_type="application/json",
    )
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "end"
    admin = Client()
    admin.force_login(roles.admin)
    response = admin.post(
        f"/api/v1/reservations/{created['id']}/deny", {}, content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "reason"
    response = admin.post(
        f"/api/v1/reservations/{created['id']}/deny",
        {"reason": "x"},
        content_type="application/json",
    )
    assert response.status_code == 409  # not pending


def test_availability_api(setup):
    _roles, client = setup
    body = client.get("/api/v1/availability", {"gpu_class": "H100-80GB"}).json()
    assert body == [
        {
            "gpu_class": "H100-80GB",
            "start": body[0]["start"],
            "end": body[0]["end"],
            "total_gpus": 2,
            "free_gpus": 2,
        }
    ]
    response = client.get("/api/v1/availability", {"start": "2026-12-01T00:00:00"})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "start"


# --- UI form ------------------------------------------------------------------------------


def _form(client, **overrides):
    start = timezone.localtime(_soon())
    data = {
        "team": "",
        "gpu_class": "",
        "count": 1,
        "placement": "any",
        "purpose": "",
        "start": start.strftime("%Y-%m-%dT%H:%M"),
        "end": (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
    }
    data.update(overrides)
    return client.post("/reservations/new/", data)


@pytest.fixture
def form_setup(setup):
    roles, client = setup
    from gpuquota.inventory.models import GpuClass

    return roles, client, {"team": roles.team.pk, "gpu_class": GpuClass.objects.get().pk}


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"count": 0}, "at least 1"),
        ({"count": 5000}, "At most"),
        ({"start": "2026-13-40T10:00"}, "Enter a date and time"),
        ({"start": "2020-01-01T10:00"}, "cannot be in the past"),
    ],
)
def test_form_bad_input_shows_a_message_and_stores_nothing(form_setup, overrides, words):
    _roles, client, ids = form_setup
    response = _form(client, **ids, **overrides)
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not Reservation.objects.exists()


def test_form_end_before_start(form_setup):
    _roles, client, ids = form_setup
    response = _form(client, **ids, start="2027-03-01T10:00", end="2027-03-01T09:00")
    assert "The end must be after the start." in response.content.decode()
    assert 'id="end-errors"' in response.content.decode()


@pytest.mark.parametrize(
    ("local", "words"),
    [("2027-10-31T02:30", "happens twice"), ("2027-03-28T02:30", "does not exist")],
)
def test_form_refuses_dst_ambiguous_and_missing_local_times(form_setup, local, words):
    roles, client, ids = form_setup
    roles.lead.timezone = "Europe/Berlin"
    roles.lead.save()
    response = _form(client, **ids, start=local, end="2027-11-02T10:00")
    html = response.content.decode()
    assert words in html and 'id="start-errors"' in html
    assert not Reservation.objects.exists()


@pytest.mark.calendar
def test_form_reads_times_in_the_users_time_zone(form_setup):
    roles, client, ids = form_setup
    roles.lead.timezone = "America/New_York"
    roles.lead.save()
    # the next 1 June (daylight saving time): "next year's" was past the 400-day booking
    # horizon from January to April
    now = timezone.now()
    year = now.year if (now.month, now.day) < (5, 31) else now.year + 1
    response = _form(client, **ids, start=f"{year}-06-01T09:00", end=f"{year}-06-01T11:00")
    assert response.status_code == 302
    r = Reservation.objects.get()
    assert r.start == datetime(year, 6, 1, 13, 0, tzinfo=UTC)


def test_local_to_aware_accepts_ordinary_times():
    berlin = ZoneInfo("Europe/Berlin")
    assert local_to_aware(datetime(2027, 10, 31, 3, 30), berlin).utcoffset() == timedelta(hours=1)
    assert local_to_aware(datetime(2027, 3, 28, 3, 30), berlin).utcoffset() == timedelta(hours=2)


def test_schema_is_valid(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"))


def test_form_no_capacity_message_says_free_count_and_next_time(form_setup):
    roles, client, ids = form_setup
    start = timezone.localtime(_soon()).replace(minute=0, second=0)
    end = start + timedelta(hours=2)
    fmt = "%Y-%m-%dT%H:%M"
    _form(client, **ids, count=2, start=start.strftime(fmt), end=end.strftime(fmt))
    roles.team.quotas.update(gpus=4)
    response = _form(client, **ids, count=1, start=start.strftime(fmt), end=end.strftime(fmt))
    html = response.content.decode()
    assert "No capacity: 0 H100-80GB GPU(s) free" in html
    assert f"free for the same duration from {end:%Y-%m-%d %H:%M}" in html
    assert Reservation.objects.count() == 1


def test_admin_records_a_backfill_and_blocks_a_gpu_in_the_ui(form_setup):
    roles, _client, ids = form_setup
    admin = Client()
    admin.force_login(roles.admin)
    fmt = "%Y-%m-%dT%H:%M"
    start = timezone.localtime(timezone.now() - timedelta(days=3))
    response = admin.post(
        "/reservations/backfill/",
        {
            **ids,
            "count": 2,
            "placement": "any",
            "purpose": "missed booking",
            "start": start.strftime(fmt),
            "end": (start + timedelta(hours=5)).strftime(fmt),
        },
    )
    assert response.status_code == 302
    backfill = Reservation.objects.get(purpose="missed booking")
    assert backfill.is_backfill and backfill.status == "ended"
    from gpuquota.inventory.models import Gpu, MaintenanceBlock

    gpu = Gpu.objects.first()
    later = timezone.localtime(_soon(days=20))
    response = admin.post(
        "/reservations/maintenance/",
        {"gpu": gpu.pk, "start": later.strftime(fmt), "end": "", "reason": "fan swap"},
    )
    assert response.status_code == 302
    assert MaintenanceBlock.objects.get().valid_until is None
    # refused while assigned, with the message on the form
    response = admin.post(
        "/reservations/maintenance/",
        {
            "gpu": gpu.pk,
            "start": start.strftime(fmt),
            "end": (start + timedelta(hours=1)).strftime(fmt),
            "reason": "x",
        },
    )
    assert response.status_code == 200 and "swap it out first" in response.content.decode()


@time_machine.travel(datetime(2027, 3, 1, 9, 0, tzinfo=UTC), tick=False)
def test_window_check_reads_local_times_and_refuses_dst_gaps(form_setup):
    roles, client, ids = form_setup
    roles.lead.timezone = "Europe/Berlin"
    roles.lead.save()
    client.force_login(roles.lead)  # a session of the travelled-to day
    ok = client.get(
        "/reservations/window-check/",
        {"gpu_class": ids["gpu_class"], "start": "2027-05-01T10:00", "end": "2027-05-01T12:00"},
    )
    assert ok.json() == {"free_gpus": 2, "total_gpus": 2, "gpu_class": "H100-80GB"}
    gap = client.get(
        "/reservations/window-check/",
        {"gpu_class": ids["gpu_class"], "start": "2027-03-28T02:30", "end": "2027-03-28T12:00"},
    )
    assert gap.status_code == 200 and "does not exist" in gap.json()["errors"]["start"]


@pytest.mark.parametrize(
    ("role", "status"),
    [("admin", 200), ("lead", 200), ("other_lead", 200), ("member", 403), ("outsider", 403)],
)
@time_machine.travel(datetime(2027, 3, 1, 9, 0, tzinfo=UTC), tick=False)
def test_window_check_roles(form_setup, role, status):
    roles, _client, ids = form_setup
    client = Client()
    client.force_login(roles.users()[role])
    response = client.get(
        "/reservations/window-check/",
        {"gpu_class": ids["gpu_class"], "start": "2027-05-01T10:00", "end": "2027-05-01T12:00"},
    )
    assert response.status_code == status


def test_window_check_anonymous_goes_to_login(form_setup):
    response = Client().get("/reservations/window-check/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@time_machine.travel(datetime(2027, 3, 1, 9, 7, tzinfo=UTC), tick=False)
def test_the_hint_says_what_submitting_says(form_setup):
    """The live hint and the submit refuse a past start and a count of 0 with the same
    words; a window being typed is answered 200 (no browser console error)."""
    roles, client, ids = form_setup
    client.force_login(roles.lead)  # a session of the travelled-to day
    window = {"gpu_class": ids["gpu_class"], "team": ids["team"]}
    past = client.get("/reservations/window-check/",
                      {**window, "start": "2027-03-01 08:00", "end": "2027-03-01 12:00"})
    assert past.status_code == 200
    assert past.json()["errors"]["start"] == services.START_IN_THE_PAST
    zero = client.get("/reservations/window-check/", {
        **window, "start": "2027-03-01 10:00", "end": "2027-03-01 12:00", "count": 0})
    assert zero.json()["errors"]["count"] == services.COUNT_AT_LEAST_ONE
    submitted = _form(client, **ids, count=0, start="2027-03-01 10:00", end="2027-03-01 12:00")
    assert services.COUNT_AT_LEAST_ONE in html.unescape(submitted.content.decode())
    # An admin's back-fill form asks about past windows: no refusal there.
    admin = Client()
    admin.force_login(roles.admin)
    backfill = admin.get("/reservations/window-check/", {
        **window, "start": "2027-02-01 08:00", "end": "2027-02-01 12:00", "backfill": 1})
    assert "errors" not in backfill.json()
    lead_backfill = client.get("/reservations/window-check/", {
        **window, "start": "2027-02-01 08:00", "end": "2027-02-01 12:00", "backfill": 1})
    assert lead_backfill.json()["errors"]["start"] == services.START_IN_THE_PAST


@time_machine.travel(datetime(2027, 3, 1, 9, 7, 30, tzinfo=UTC), tick=False)
def test_the_form_starts_with_a_window_from_the_next_quarter_hour(form_setup):
    roles, client, _ids = form_setup
    client.force_login(roles.lead)
    page = client.get("/reservations/new/").content.decode()
    assert 'name="start" value="2027-03-01 09:15"' in page
    assert 'name="end" value="2027-03-02 09:15"' in page
