"""The usage API: figures equal to the exact selectors on a hand-built fleet (edges
from raw samples), the role matrix, bad input named by field, token access, and a
query count that does not grow with the fleet."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.services import api_token_create
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.figures import display_decimal
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    team_reservations_utilization,
    team_utilization,
    unreserved_busy_hours_named,
)
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import GpuClassFactory, NodeFactory, make_gpu
from tests.usage.factories import (
    T0,
    minute_samples,
    mixed_fleet,
    reserve,
)

pytestmark = pytest.mark.django_db
H, M, S = timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1)
FLEET, TEAM = "/api/v1/usage/fleet", "/api/v1/usage/teams/vision"
# 22:30:15 on Oct 31 to 00:10 on Nov 1: two partial edge hours, one whole, a day edge
START, END = T0 + 30 * M + 15 * S, T0 + 2 * H + 10 * M
PERIOD = Period(START, END)
QUERY = {"start": START.isoformat(), "end": END.isoformat()}
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]


def build(team, size: int = 1):
    """The mixed fleet (`tests.usage.factories.mixed_fleet`) for `team`."""
    mixed_fleet(team, size)


def client_for(roles, role) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(roles.users()[role])
    return client


def _ratio(value) -> str | None:
    return None if value is None else str(display_decimal(value, "0.0001"))


def test_the_fleet_figures_are_the_exact_selectors(roles):
    build(roles.team)
    body = client_for(roles, "admin").get(FLEET, {**QUERY, "by": "day"}).json()
    exact = fleet_utilization(period=PERIOD)
    assert (body["start"], body["end"]) == ("2026-10-31T22:30:15Z", "2026-11-01T00:10:00Z")
    assert body["busy_threshold_percent"] == "5"
    fleet = body["fleet"]
    assert fleet["in_service_s"] == exact.in_service_s == 3 * PERIOD.seconds
    assert fleet["failed_s"] == exact.failed_s == 1800
    assert fleet["available_s"] == exact.available_s
    assert fleet["busy_s"] == exact.sums.ok_busy_s and fleet["busy_s"] > 0
    assert fleet["covered_s"] == exact.sums.ok_covered_s
    assert fleet["utilization"] == _ratio(exact.utilization)
    assert fleet["reserved"]["reserved_s"] == exact.reserved.reserved_s == PERIOD.seconds
    assert fleet["reserved"]["busy_s"] == exact.reserved.sums.busy_s
    assert fleet["reserved"]["coverage"] == _ratio(exact.reserved.coverage)
    by_class = {row["gpu_class"]: row for row in body["classes"]}
    for klass, figures in classes_utilization(period=PERIOD):
        row = by_class[klass.name]
        assert (row["figures"]["in_service_s"], row["figures"]["failed_s"],
                row["figures"]["busy_s"]) == (
            figures.in_service_s, figures.failed_s, figures.sums.ok_busy_s)
        assert row["figures"]["reserved"]["reserved_s"] == figures.reserved.reserved_s
        assert [(d["day"], d["reserved_s"], d["busy_s"]) for d in row["days"]] == [
            (str(d.day), d.reserved_s, d.busy_s)
            for d in daily_usage(period=PERIOD, gpu_class=klass)]
    l4 = by_class["L4"]["figures"]
    assert l4["failed_s"] == 1800 and l4["reserved"]["reserved_s"] == 0
    assert l4["reserved"]["utilization"] is None  # nothing reserved: no data, not 0
    assert [(d["day"], d["reserved_s"]) for d in body["days"]] == [
        ("2026-10-31", 5385), ("2026-11-01", 600)]
    assert body["unreserved"] == [{"team": r["team"], "team_slug": r["slug"],
                                   "busy_s": r["seconds"]}
                                  for r in unreserved_busy_hours_named(period=PERIOD)]
    assert body["unreserved"][0]["team"] == "Ml" and body["unreserved"][0]["team_slug"] == "ml"


def test_the_team_figures_are_the_exact_selectors(roles):
    build(roles.team)
    body = client_for(roles, "member").get(TEAM, QUERY).json()
    exact = team_utilization(team=roles.team, period=PERIOD)
    figures = body["figures"]
    assert figures["reserved_s"] == exact.reserved_s == PERIOD.seconds
    # busy while util was 60: from the start (22:30:15) to 23:40, cut inside a sample
    assert figures["busy_s"] == exact.sums.busy_s == 4185
    assert figures["covered_s"] == exact.sums.covered_s
    assert figures["utilization"] == _ratio(exact.utilization)
    assert figures["mean_util_gpu_percent"] == str(display_decimal(exact.mean_util_gpu))
    [row] = team_reservations_utilization(team=roles.team, period=PERIOD)
    [reservation] = body["reservations"]
    assert reservation["id"] == row.reservation.id and reservation["status"] == "active"
    assert reservation["figures"]["busy_s"] == row.figures.sums.busy_s
    assert body["days"] is None
    days = client_for(roles, "member").get(TEAM, {**QUERY, "by": "day"}).json()["days"]
    assert [(date.fromisoformat(d["day"]), d["reserved_s"], d["busy_s"]) for d in days] == [
        (d.day, d.reserved_s, d.busy_s) for d in daily_usage(period=PERIOD, team=roles.team)]


def test_a_period_not_ended_is_to_date(roles, time_machine):
    time_machine.move_to(T0 + H + 20 * M, tick=False)
    build(roles.team)
    body = client_for(roles, "lead").get(TEAM, {"start": T0.isoformat(),
                                                "end": (T0 + 30 * H).isoformat()}).json()
    assert body["end"] == "2026-10-31T23:20:00Z"
    assert body["figures"]["reserved_s"] == 73 * 60  # from 22:07 to now


@pytest.mark.parametrize("role", ROLES)
def test_fleet_roles(roles, role):
    response = client_for(roles, role).get(FLEET, QUERY)
    expected = 401 if role == "anonymous" else 200  # as the utilization page: signed in
    assert response.status_code == expected
    if expected == 200:
        unreserved = response.json()["unreserved"]
        assert (unreserved is not None) == (role == "admin")  # owner teams: admins only


@pytest.mark.parametrize("role", ROLES)
def test_team_roles(roles, role):
    response = client_for(roles, role).get(TEAM, QUERY)
    expected = {"admin": 200, "lead": 200, "member": 200, "other_lead": 404, "outsider": 404,
                "anonymous": 401}[role]
    assert response.status_code == expected
    if expected == 404:
        assert response.json()["code"] == "not_found"
    assert client_for(roles, role).get("/api/v1/usage/teams/nosuch", QUERY).status_code == \
        (401 if role == "anonymous" else 404)


def test_a_personal_token_reads_the_figures(roles):
    _token, key = api_token_create(user=roles.lead, name="sreport")
    response = Client().get(TEAM, QUERY, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200 and response.json()["team"] == "vision"


def _iso(value: datetime) -> str:
    return value.isoformat()


BAD = [
    ({}, "start"),
    ({"end": _iso(END)}, "start"),
    ({"start": _iso(START)}, "end"),
    ({**QUERY, "start": "2026-02-30T00:00:00Z"}, "start"),
    ({**QUERY, "start": "2026-10-31T22:99:00Z"}, "start"),
    ({**QUERY, "start": "2026-10-31T22:00:00"}, "start"),  # naive
    ({**QUERY, "start": ""}, "start"),
    ({**QUERY, "end": "\x00"}, "end"),
    ({**QUERY, "start": "2026-10-31T22:00:00.500Z"}, "start"),
    ({**QUERY, "end": _iso(START)}, "end"),
    ({**QUERY, "end": _iso(START - H)}, "end"),
    ({**QUERY, "end": _iso(START + timedelta(days=367))}, "end"),
    ({"start": "2999-01-01T00:00:00Z", "end": "2999-01-02T00:00:00Z"}, "start"),
    ({**QUERY, "by": "week"}, "by"),
]


@pytest.mark.parametrize("url", [FLEET, TEAM])
@pytest.mark.parametrize(("query", "field"), BAD)
def test_bad_input_is_a_400_naming_the_field(roles, url, query, field):
    response = client_for(roles, "lead").get(url, query)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert field in [error["field"] for error in body["errors"]]


def test_a_year_is_allowed(roles):
    start = datetime(2025, 11, 1, tzinfo=UTC)
    query = {"start": _iso(start), "end": _iso(start + timedelta(days=366))}
    assert client_for(roles, "lead").get(TEAM, query).status_code == 200


def test_edges_older_than_the_raw_samples_must_be_whole_hours(roles, monkeypatch):
    from gpuquota.ingest import conf as ingest_conf

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 90)
    old = datetime(2025, 1, 6, 10, tzinfo=UTC)
    client = client_for(roles, "admin")
    for url in (FLEET, TEAM):
        response = client.get(url, {"start": _iso(old + M), "end": _iso(old + 2 * H)})
        assert response.status_code == 400
        assert response.json()["errors"][0]["field"] == "period"
        assert "expired" in response.json()["detail"]
        whole = client.get(url, {"start": _iso(old), "end": _iso(old + 2 * H), "by": "day"})
        assert whole.status_code == 200


def _queries(client, url, query) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, query).status_code == 200
    return len(queries)


def test_the_query_count_does_not_grow_with_the_fleet(roles):
    counts = []
    client = client_for(roles, "admin")
    for size in (1, 4):
        build(roles.team, size) if size == 1 else _more(roles.team, size)
        counts.append(tuple(_queries(client, url, {**QUERY, "by": by})
                            for url in (FLEET, TEAM) for by in ("period", "day")))
    assert counts[0] == counts[1], counts
    # fixed per request (two edge hours from samples, several aggregates); by=day on the
    # fleet adds a fixed number per GPU class (two here)
    assert max(counts[0]) < 160, counts


def _more(team, size: int) -> None:
    """Grow the fleet: more reserved, busy and failed GPUs in the same two classes."""
    node = NodeFactory()
    other = GpuClassFactory(name="L4")
    for i in range(size):
        reserved = make_gpu(node=node, index=2 * i, at=T0 - H)
        minute_samples(reserved, T0, 150, util=40 + i)
        reserve(team, reserved, T0 + i * M, T0 + 5 * H)
        failing = make_gpu(node=node, index=2 * i + 1, at=T0 - H, gpu_class=other)
        minute_samples(failing, T0, 150, util=90)
        GpuHealthInterval.objects.create(gpu=failing, state="failed", reason="xid 79",
                                         valid_from=T0 + 50 * M, valid_until=T0 + 80 * M)
    dirty_hours_process()
