"""A creating request sent twice makes one thing (issue 29 §4): the API's creating POSTs
(reservations, lend now) honour `Idempotency-Key`, per user, with an expiry, under
concurrency; the web forms that create (a reservation, a personal token) carry a one-time
token. A request whose answer was lost and that the client sends again changes nothing."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client

from accounts.models import ApiToken
from gpuquota.core.models import IdempotencyKey
from gpuquota.reservations.models import Loan, Reservation
from tests.helpers import assert_api_error, run_concurrently
from tests.reservations.factories import NOW

pytestmark = pytest.mark.django_db
KEY = "5f0c7f1e-6c55-4d0b-9a51-2b7f3c1d9e10"


@pytest.fixture
def world(fleet, time_machine):
    time_machine.move_to(NOW, tick=False)
    return fleet


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _reserve(client, key=KEY, **overrides):
    payload = {"team": "vision", "gpu_class": "H100-80GB", "count": 1,
               "start": (NOW + timedelta(hours=1)).isoformat(),
               "end": (NOW + timedelta(hours=3)).isoformat(), **overrides}
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post("/api/v1/reservations", payload, content_type="application/json",
                       **headers)


def test_a_repeat_answers_the_first_result_and_creates_nothing(world):
    client = _client(world.vision_lead)
    first = _reserve(client)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first
    again = _reserve(client)  # the answer was lost; the script sends it again
    assert (again.status_code, again.json()) == (201, first.json())
    assert again["Idempotent-Replayed"] == "true"
    assert Reservation.objects.count() == 1
    assert _reserve(client, key=None).status_code == 201  # no key: a new request each time
    assert Reservation.objects.count() == 2


def test_the_same_key_with_another_body_is_refused_and_keys_are_per_user(world):
    client = _client(world.vision_lead)
    assert _reserve(client).status_code == 201
    refused = _reserve(client, count=2)
    assert_api_error(refused, 422, "Idempotency-Key")
    assert refused.json()["code"] == "idempotency_key_reused"
    assert Reservation.objects.count() == 1
    other = _reserve(_client(world.speech_lead), team="speech")  # the same key, another user
    assert other.status_code == 201 and other.json()["id"] != _reserve(client).json()["id"]
    assert Reservation.objects.count() == 2


def test_a_failed_request_keeps_nothing_and_a_bad_key_is_400(world):
    client = _client(world.vision_lead)
    assert _reserve(client, count=99).status_code == 409  # no capacity: nothing created
    assert not IdempotencyKey.objects.exists()
    assert _reserve(client).status_code == 201  # the corrected retry runs
    for bad in ("", "has space", "x" * 256, "é"):
        assert_api_error(_reserve(client, key=bad), 400, "Idempotency-Key")


def test_a_key_expires(world, time_machine):
    client = _client(world.vision_lead)
    first = _reserve(client).json()
    time_machine.move_to(NOW + timedelta(hours=24, seconds=1), tick=False)
    start = NOW + timedelta(days=2)
    again = _reserve(client, start=start.isoformat(),
                     end=(start + timedelta(hours=2)).isoformat())
    assert again.status_code == 201 and again.json()["id"] != first["id"]


def test_lend_now_is_idempotent_too(world, settings):
    settings.LENDING_ENABLED = True
    reservation = world.request(start=NOW, end=NOW + timedelta(hours=4))
    client = _client(world.vision_lead)

    def lend():
        return client.post("/api/v1/lending/lend-now", {"reservation": reservation.pk},
                           content_type="application/json", HTTP_IDEMPOTENCY_KEY=KEY)

    first, again = lend(), lend()
    assert first.status_code == 201, first.json()
    assert (again.status_code, again.json()) == (201, first.json())
    assert Loan.objects.count() == 1


def test_the_schema_documents_the_header(world):
    schema = _client(world.admin).get(
        "/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ("/api/v1/reservations", "/api/v1/lending/lend-now"):
        operation = schema["paths"][path]["post"]
        [header] = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
        assert header["in"] == "header" and not header.get("required")
        assert "422" in operation["responses"] and "503" in operation["responses"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_repeats_create_one_reservation(fleet, time_machine):
    time_machine.move_to(NOW, tick=False)
    lead = fleet.vision_lead
    responses = run_concurrently([lambda: _reserve(_client(lead)) for _ in range(6)])
    assert [r.status_code for r in responses] == [201] * 6
    assert len({r.content for r in responses}) == 1
    assert Reservation.objects.count() == 1
    assert IdempotencyKey.objects.get().status_code == 201


@pytest.mark.postgres
def test_postgres_refuses_one_key_twice_for_a_user(world):
    _reserve(_client(world.vision_lead))
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO core_idempotencykey (user_id, key, fingerprint, "
                       "status_code, response_body, created_at, expires_at) SELECT user_id, "
                       "key, 'x', 201, '', created_at, expires_at FROM core_idempotencykey")


def _form(client, token: str, **overrides):
    data = {"team": str(overrides.pop("team", None) or ""), "gpu_class": "", "count": "1",
            "start": f"{NOW + timedelta(hours=1):%Y-%m-%d %H:%M}",
            "end": f"{NOW + timedelta(hours=3):%Y-%m-%d %H:%M}", "placement": "any",
            "purpose": "sweep", "form_token": token, **overrides}
    return client.post("/reservations/new/", data)


def test_the_reservation_form_sent_twice_makes_one_reservation(world):
    client = _client(world.vision_lead)
    page = client.get("/reservations/new/").content.decode()
    assert 'name="form_token"' in page
    fields = {"team": world.vision.pk, "gpu_class": world.gpu_class.pk}
    first = _form(client, "tok-1", **fields)
    again = _form(client, "tok-1", **fields)  # a double click, a reload that sends it again
    assert first.status_code == again.status_code == 302
    assert again["Location"] == first["Location"] == "/teams/vision/"
    assert Reservation.objects.count() == 1
    shown = client.get("/teams/vision/").content.decode()
    assert "This form was already sent; nothing was done twice." in shown
    # the same form token with other values is refused, and a new token offered
    changed = _form(client, "tok-1", **{**fields, "count": "2"})
    assert changed.status_code == 200 and Reservation.objects.count() == 1
    body = changed.content.decode()
    assert "already sent with other values" in body and 'value="tok-1"' not in body
    assert _form(client, "tok-2", **fields).status_code == 302  # a new form: a new request
    assert Reservation.objects.count() == 2


def test_the_token_form_sent_twice_makes_one_token(world):
    client = _client(world.vision_lead)
    assert 'name="form_token"' in client.get("/accounts/profile/").content.decode()
    for _ in range(2):
        response = client.post("/accounts/profile/tokens/", {"name": "ci", "form_token": "t-9"})
        assert response.status_code == 302
    assert ApiToken.objects.filter(user=world.vision_lead).count() == 1


def test_expired_keys_are_deleted_by_the_beat_task(world, time_machine):
    from gpuquota.celery import collect_beat_schedule
    from gpuquota.core.tasks import idempotency_keys_expire_task

    assert collect_beat_schedule()["core-idempotency-keys-expire"]["task"] == (
        "core.idempotency_keys_expire")
    _reserve(_client(world.vision_lead))
    assert idempotency_keys_expire_task() == 0
    time_machine.move_to(NOW + timedelta(hours=24), tick=False)
    assert idempotency_keys_expire_task() == 1 and not IdempotencyKey.objects.exists()
