"""Issue 11, item by item, with the exact inputs quoted there: each is a 4xx in the one
JSON error format naming the field, never a 500 (on PostgreSQL, with a bearer token)."""

import json

import pytest
from django.test import Client

from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from tests.hardening.conftest import soon

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def error(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) >= {"code", "detail", "errors"}
    return body


def fields(body: dict) -> set:
    return {item["field"] for item in body["errors"]}


def booking(**overrides) -> dict:
    start = soon()
    payload = {"team": "vision", "gpu_class": "H100-80GB", "count": 1,
               "start": start.isoformat(), "end": soon(26).isoformat()}
    return {**payload, **overrides}


def post(client, url: str, payload) -> object:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return client.post(url, data=data, content_type="application/json")


@pytest.fixture
def reservation(roles, fleet):
    return reservation_create(team=roles.team, gpu_class=fleet, count=1, start=soon(),
                              end=soon(28), requested_by=roles.lead)


IMPOSSIBLE = ["2026-12-10T12:99:00Z", "2026-12-10T25:00:00Z", "2026-02-30T10:00:00Z",
              "2026-12-10T12:00:00+25:00"]


# 1. Impossible dates and times -------------------------------------------------------
@pytest.mark.parametrize("value", IMPOSSIBLE)
def test_impossible_start_of_a_reservation_is_a_400(lead_api, value):
    body = error(post(lead_api, "/api/v1/reservations", booking(start=value)), 400)
    assert fields(body) == {"start"}
    assert "Not a real date and time" in body["detail"]
    assert not Reservation.objects.exists()


@pytest.mark.parametrize("value", IMPOSSIBLE)
def test_impossible_end_of_an_extension_is_a_400(lead_api, reservation, value):
    url = f"/api/v1/reservations/{reservation.pk}/extend"
    body = error(post(lead_api, url, {"end": value}), 400)
    assert fields(body) == {"end"}


@pytest.mark.parametrize("value", IMPOSSIBLE)
def test_impossible_start_of_availability_is_a_400(lead_api, value):
    body = error(lead_api.get("/api/v1/availability", {"start": value}), 400)
    assert fields(body) == {"start"}


def test_an_empty_instant_is_refused_not_read_as_absent(lead_api):
    body = error(lead_api.get("/api/v1/availability?start="), 400)
    assert fields(body) == {"start"}


# 2. NUL bytes ----------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "field"), [
    ("/api/v1/reservations?team=%00", "team"),
    ("/api/v1/reservations?status=%00", "status"),
    ("/api/v1/audit?team=%00", "team"),
    ("/api/v1/availability?gpu_class=%00", "gpu_class"),
])
def test_nul_in_a_query_parameter_is_a_400(lead_api, url, field):
    body = error(lead_api.get(url), 400)
    assert fields(body) == {field}
    assert "NUL" in body["detail"]


def test_nul_in_a_json_body_is_a_400(lead_api):
    body = error(post(lead_api, "/api/v1/reservations", booking(gpu_class="H\u0000")), 400)
    assert fields(body) == {"gpu_class"}


def test_nul_in_a_form_body_is_a_400(lead_api):
    response = lead_api.post("/api/v1/reservations", {"team": "vision", "gpu_class": "H\x00"})
    assert fields(error(response, 400)) == {"gpu_class"}


def test_nul_in_a_page_query_is_a_400_not_a_500(roles):
    client = Client()
    client.force_login(roles.lead)
    assert client.get("/teams/vision/?month=%00").status_code == 400


# 3. Huge numbers ---------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["/api/v1/reservations", "/api/v1/audit"])
@pytest.mark.parametrize("parameter", ["limit", "offset"])
def test_huge_limit_or_offset_is_a_400(lead_api, reservation, url, parameter):
    body = error(lead_api.get(url, {parameter: "99999999999999999999"}), 400)
    assert fields(body) == {parameter}


@pytest.mark.parametrize("query", [{"offset": "null"}, {"limit": "0"}, {"limit": "-1"},
                                   {"offset": "-5"}, {"limit": "ten"}])
def test_malformed_pagination_is_refused(lead_api, reservation, query):
    assert fields(error(lead_api.get("/api/v1/reservations", query), 400)) == set(query)


def test_pagination_within_bounds_still_works(lead_api, reservation):
    response = lead_api.get("/api/v1/reservations", {"limit": "1000", "offset": "0"})
    assert response.status_code == 200 and response.json()["count"] == 1


# 4. Far years and the booking horizon -------------------------------------------------------
def test_availability_in_9999_is_a_400(lead_api):
    body = error(lead_api.get("/api/v1/availability?start=9999-12-31T00:00:00Z"), 400)
    assert fields(body) == {"start"}


def test_a_reservation_in_9999_is_refused(lead_api):
    payload = booking(start="9999-12-31T00:00:00Z", end="9999-12-31T12:00:00Z")
    assert error(post(lead_api, "/api/v1/reservations", payload), 400)["errors"]
    assert not Reservation.objects.exists()


def test_a_booking_beyond_the_horizon_says_when_it_ends(lead_api):
    payload = booking(start=soon(401 * 24).isoformat(), end=soon(401 * 24 + 2).isoformat())
    body = error(post(lead_api, "/api/v1/reservations", payload), 400)
    assert fields(body) == {"start"}
    horizon = soon(400 * 24).strftime("%Y-%m-%d")
    assert "400 days ahead" in body["detail"] and horizon in body["detail"]
    assert not Reservation.objects.exists()


def test_the_horizon_is_a_setting(lead_api, settings):
    settings.BOOKING_HORIZON_DAYS = 30
    payload = booking(start=soon(31 * 24).isoformat(), end=soon(31 * 24 + 2).isoformat())
    assert "30 days ahead" in error(post(lead_api, "/api/v1/reservations", payload),
                                    400)["detail"]
    within = booking(start=soon(29 * 24).isoformat(), end=soon(29 * 24 + 2).isoformat())
    assert post(lead_api, "/api/v1/reservations", within).status_code == 201


def test_an_extension_beyond_the_horizon_is_refused(lead_api, reservation, settings):
    settings.BOOKING_HORIZON_DAYS = 30
    url = f"/api/v1/reservations/{reservation.pk}/extend"
    body = error(post(lead_api, url, {"end": soon(24 * 31).isoformat()}), 400)
    assert fields(body) == {"end"} and "30 days ahead" in body["detail"]


def test_availability_beyond_the_horizon_is_refused(lead_api):
    body = error(lead_api.get("/api/v1/availability", {"start": soon(24 * 401).isoformat()}),
                 400)
    assert fields(body) == {"start"}


# 5. Deep JSON ------------------------------------------------------------------------------
def test_deeply_nested_json_is_a_400(lead_api):
    body = error(post(lead_api, "/api/v1/reservations", "[" * 100_000 + "]" * 100_000), 400)
    assert "nested" in body["detail"]


def test_json_nested_past_the_limit_is_a_400_even_when_python_could_parse_it(lead_api):
    body = error(post(lead_api, "/api/v1/reservations", "[" * 100 + "]" * 100), 400)
    assert "nested deeper than 64" in body["detail"]


# 6. The admin's "Add API token" --------------------------------------------------------------
def test_the_admin_cannot_add_an_api_token(roles):
    client = Client()
    client.force_login(roles.admin)
    assert client.get("/admin/accounts/apitoken/add/").status_code == 403
    assert client.post("/admin/accounts/apitoken/add/",
                       {"user": roles.lead.pk, "name": "x"}).status_code == 403
    assert client.post("/admin/accounts/apitoken/add/",
                       {"user": roles.lead.pk, "name": "y"}).status_code == 403
    from accounts.models import ApiToken

    assert not ApiToken.objects.exists()


# Answers in the wrong shape --------------------------------------------------------------------
def test_a_3_mb_json_body_is_a_json_413(lead_api):
    payload = booking(purpose="x" * 3_000_000)
    body = error(post(lead_api, "/api/v1/reservations", payload), 413)
    assert body["code"] == "too_large" and fields(body) == {"body"}


def test_2000_form_fields_are_a_json_400(lead_api):
    data = "&".join(f"field{i}=1" for i in range(2000))
    response = lead_api.post("/api/v1/reservations", data=data,
                             content_type="application/x-www-form-urlencoded")
    assert "form fields" in error(response, 400)["detail"]


def test_2000_query_parameters_are_a_json_400(lead_api):
    query = "&".join(f"p{i}=1" for i in range(2000))
    assert "query parameters" in error(lead_api.get(f"/api/v1/reservations?{query}"),
                                       400)["detail"]


@pytest.mark.parametrize("url", ["/api/v1/reservations/null,null", "/api/v1/nope", "/api/"])
def test_unknown_api_paths_are_a_json_404(lead_api, url):
    assert error(lead_api.get(url), 404)["code"] == "not_found"


def test_a_refused_method_is_a_json_405(lead_api):
    assert error(lead_api.delete("/api/v1/reservations"), 405)["code"] == "method_not_allowed"
    response = lead_api.get("/api/v1/agent/batches")
    assert error(response, 405) and response["Allow"] == "POST"


def test_a_500_in_the_api_is_json_with_debug_off(lead_api, settings, monkeypatch, caplog):
    settings.DEBUG = False

    def broken():
        raise RuntimeError("a bug")

    monkeypatch.setattr("gpuquota.reservations.api.gpu_classes_reservable", broken)
    body = error(lead_api.get("/api/v1/gpu-classes"), 500)
    assert body["code"] == "server_error" and "a bug" not in json.dumps(body)
    assert "a bug" in caplog.text  # logged for the operators


def test_an_unknown_status_names_the_allowed_values(lead_api):
    body = error(lead_api.get("/api/v1/reservations?status=AAA"), 400)
    assert fields(body) == {"status"}
    for value in Reservation.Status.values:
        assert value in body["detail"]


def test_the_schema_documents_the_404_of_list_filters(client):
    schema = client.get("/api/schema/?format=json").json()
    for path in ("/api/v1/reservations", "/api/v1/audit"):
        responses = schema["paths"][path]["get"]["responses"]
        assert {"200", "400", "401", "404", "429"} <= set(responses)
        parameters = {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}
        assert parameters["limit"]["schema"]["maximum"] == 1000
    status = {p["name"]: p for p in schema["paths"]["/api/v1/reservations"]["get"][
        "parameters"]}["status"]
    assert set(status["schema"]["enum"]) == {*Reservation.Status.values, ""}  # "": all


def test_empty_filters_mean_all(lead_api, reservation):
    for url in ("/api/v1/reservations?status=&team=", "/api/v1/audit?team="):
        assert lead_api.get(url).status_code == 200


def test_the_reservation_form_refuses_year_9999(roles, fleet):
    client = Client()
    client.force_login(roles.lead)
    response = client.post("/reservations/new/", {
        "team": roles.team.pk, "gpu_class": fleet.pk, "count": 1, "placement": "any",
        "start": "9999-12-31T10:00", "end": "9999-12-31T12:00"})
    assert response.status_code in (200, 400)
    assert "Give a year from 1970 to 2999" in response.content.decode()
    assert not Reservation.objects.exists()
