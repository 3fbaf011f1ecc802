"""The export API: the role matrix on every endpoint, bad periods, drafts computed on
request when stale, the OpenAPI schema."""

from datetime import timedelta

import pytest
from django.test import Client

from reports.models import Statement
from reports.services_statements import statement_draft
from tests.helpers import csv_lines
from tests.reports.factories import OCT_3, OCTOBER, SETTLED, h100, reserved_hours

pytestmark = pytest.mark.django_db
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]
TEAM_URLS = ["/api/v1/statements/vision/2026-10", "/api/v1/statements/vision/2026-10.csv"]
MONTH_URLS = ["/api/v1/statements/2026-10", "/api/v1/statements/2026-10.csv"]


@pytest.fixture
def billed(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    roles.gpu_class = h100()
    reserved_hours(roles.team, roles.gpu_class, OCT_3, 10)
    reserved_hours(roles.other_team, roles.gpu_class, OCT_3, 4)
    return roles


def client_for(roles, role) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(roles.users()[role])
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url", TEAM_URLS)
def test_team_statement_roles(billed, role, url):
    response = client_for(billed, role).get(url)
    expected = {"admin": 200, "lead": 200, "member": 200, "other_lead": 404, "outsider": 404,
                "anonymous": 401}[role]
    assert response.status_code == expected
    if expected == 200 and url.endswith(".csv"):
        assert csv_lines(response.content.decode())[1] == (
            "vision,2026-10,USD,reserved,H100-80GB,36000,10.00,2.50,25.00,,"
            f"{billed.team.cost_center},draft,,0.000,0.000,0.000,0.000,0.000,")
    elif expected == 200:
        assert response.json()["total"] == "25.00"
    elif expected == 404:
        assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url", MONTH_URLS)
def test_organisation_month_roles(billed, role, url):
    response = client_for(billed, role).get(url)
    expected = {"anonymous": 401, "outsider": 404}.get(role, 200)
    assert response.status_code == expected
    if expected != 200:
        return
    seen = {"admin": {"speech", "vision"}, "lead": {"vision"}, "member": {"vision"},
            "other_lead": {"speech"}}[role]
    if url.endswith(".csv"):
        rows = csv_lines(response.content.decode())
        assert {row.split(",")[0] for row in rows[1:]} == seen
        assert rows[0].endswith(",reason,cost_center,status,approved_at,energy_kwh,"
                                "facility_energy_kwh,co2e_kg,idle_energy_kwh,idle_co2e_kg,"
                                "energy_basis")
    else:
        assert {s["team"] for s in response.json()["statements"]} == seen


@pytest.mark.parametrize("period, message", [
    ("2026-13", "2026-13 is not a month."), ("abc", "Expected a month as YYYY-MM, not 'abc'."),
    ("2026-12", "2026-12 has not started yet."), ("2026-1", "Expected a month as YYYY-MM"),
    ("0000-01", "0000-01 is not a month."),
])
@pytest.mark.parametrize("prefix", ["/api/v1/statements/vision/", "/api/v1/statements/"])
@pytest.mark.parametrize("suffix", ["", ".csv"])
def test_bad_periods_are_400_naming_the_field(billed, prefix, period, message, suffix):
    response = client_for(billed, "lead").get(f"{prefix}{period}{suffix}")
    assert response.status_code == 400
    body = response.json()
    assert body["errors"][0]["field"] == "period" and body["detail"].startswith(message)


def test_a_stale_draft_is_recomputed_on_request_and_a_fresh_one_is_not(billed, time_machine):
    statement_draft(team=billed.team, period=OCTOBER)
    reserved_hours(billed.team, billed.gpu_class, OCT_3 + timedelta(hours=20), 2)
    client = client_for(billed, "lead")
    assert client.get(TEAM_URLS[0]).json()["total"] == "25.00"  # fresh: as stored
    time_machine.move_to(SETTLED + timedelta(minutes=11), tick=False)
    body = client.get(TEAM_URLS[0]).json()
    assert (body["total"], body["status"]) == ("30.00", "draft")
    statement = Statement.objects.get(team=billed.team)
    assert statement.computed_at == SETTLED + timedelta(minutes=11)


def test_the_endpoints_are_in_the_openapi_schema(billed):
    client = client_for(billed, "admin")
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ["/api/v1/statements/{team}/{period}", "/api/v1/statements/{team}/{period}.csv",
                 "/api/v1/statements/{period}", "/api/v1/statements/{period}.csv"]:
        assert "get" in schema["paths"][path]
    line = schema["components"]["schemas"]["Line"]["properties"]
    assert set(line) == {"kind", "gpu_class", "seconds", "hours", "rate", "amount", "reason"}


def _bearer(user) -> dict:
    from accounts.services import api_token_create

    _token, key = api_token_create(user=user, name="finance script", expires_at=None)
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.mark.parametrize("role", ROLES)
def test_the_statement_pdf_is_in_the_api_for_sessions_and_tokens(billed, role):
    """`GET /api/v1/statements/<team>/<YYYY-MM>.pdf`, as the JSON and CSV: a session or a
    personal token, the same roles; errors in the one JSON format, even for a client that
    accepts only PDF."""
    expected = {"admin": 200, "lead": 200, "member": 200, "other_lead": 404, "outsider": 404,
                "anonymous": 401}[role]
    url = "/api/v1/statements/vision/2026-10.pdf"
    user = billed.users()[role]
    headers = _bearer(user) if role != "anonymous" else {}
    for client, extra in ((client_for(billed, role), {}), (Client(), headers)):
        response = client.get(url, HTTP_ACCEPT="application/pdf", **extra)
        assert response.status_code == expected, (role, extra)
        if expected == 200:
            assert response["Content-Type"] == "application/pdf"
            assert response.content.startswith(b"%PDF")
            assert 'filename="statement-vision-2026-10.pdf"' in response["Content-Disposition"]
        else:
            assert response["Content-Type"] == "application/json"
    bad = client_for(billed, "lead").get("/api/v1/statements/vision/2026-13.pdf")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "period"
    wrong = Client().get(url, HTTP_AUTHORIZATION="Bearer gqu_not-a-token")
    assert wrong.status_code == 401 and wrong.json()["code"]


def test_the_pdf_operation_is_in_the_schema(billed):
    schema = client_for(billed, "admin").get(
        "/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/v1/statements/{team}/{period}.pdf"]["get"]
    assert operation["operationId"] == "statement_pdf"
    assert "application/pdf" in operation["responses"]["200"]["content"]
    assert {"400", "401", "404", "409"} <= set(operation["responses"])


@pytest.mark.parametrize("kind", ["pdf", "csv"])
def test_the_web_download_links_take_a_bearer_token_too(billed, kind):
    """The statement page's CSV and PDF links, fetched by a script with a personal token,
    answer the file (they redirected to the login page)."""
    statement_draft(team=billed.team, period=OCTOBER)
    url = f"/statements/vision/2026-10.{kind}"
    response = Client().get(url, **_bearer(billed.lead))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/pdf" if kind == "pdf" else "text/csv")
    assert Client().get(url, **_bearer(billed.other_lead)).status_code == 404
    refused = Client().get(url, HTTP_AUTHORIZATION="Bearer gqu_revoked-or-made-up")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    basic = Client().get(url, HTTP_AUTHORIZATION="Basic Zm9vOmJhcg==")
    assert basic.status_code == 401
    assert Client().get(url).status_code == 302  # a person: the login page, as before
