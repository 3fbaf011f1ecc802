"""The reclaim API against the role matrix, and bad input on every action: one JSON
error format, a 4xx, never a 500."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Assignment
from reclaim.models import Exemption, Recommendation
from tests.helpers import assert_api_error, role_client
from tests.reclaim.factories import World, make_rec

pytestmark = pytest.mark.django_db
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]
API = "/api/v1/reclaim"
S = Recommendation.Status


@pytest.fixture
def world():
    return World.create(gpus=4)


@pytest.mark.parametrize("role", ROLES)
def test_read_list_and_detail(world, role):
    rec = make_rec(world)
    client = role_client(world, role)
    listed = client.get(f"{API}/recommendations")
    detail = client.get(f"{API}/recommendations/{rec.pk}")
    if role == "anonymous":
        assert listed.status_code == 401 and detail.status_code == 401
        return
    ids = [r["id"] for r in listed.json()["results"]]
    can_read = role in ("admin", "lead", "member")
    assert ids == ([rec.pk] if can_read else [])
    assert detail.status_code == (200 if can_read else 404)
    if can_read:
        body = detail.json()
        assert body["team"] == "vision" and body["savings"] == "120.00"
        assert len(body["gpus"]) == 1 and body["gpus"][0]["state"] == "pending"


def accepted(world):
    now = timezone.now().replace(microsecond=0)
    return make_rec(world, status=S.ACCEPTED, accepted_by=world.admin, accepted_at=now,
                    grace_until=now + timedelta(hours=4))


def objected(world):
    now = timezone.now().replace(microsecond=0)
    return make_rec(world, status=S.OBJECTED, accepted_by=world.admin, accepted_at=now,
                    grace_until=now + timedelta(hours=4), objection_by=world.lead,
                    objection_at=now, objection_reason="still needed")


# action: (path, body, make the recommendation, status allowed per role, status after)
ACTIONS = {
    "accept": ("accept", {}, make_rec, {"admin": 200}, S.ACCEPTED),
    "dismiss": ("dismiss", {"reason": "known", "snooze_s": 3600}, make_rec, {"admin": 200},
                S.DISMISSED),
    "object": ("object", {"reason": "eval tonight"}, accepted, {"admin": 200, "lead": 200},
               S.OBJECTED),
    "uphold": ("uphold", {"reason": "idle for days"}, objected, {"admin": 200}, S.ACCEPTED),
    "withdraw": ("withdraw", {"reason": "fair"}, objected, {"admin": 200}, S.DISMISSED),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS)
def test_actions_by_role(world, action, role):
    path, body, make, allowed, after = ACTIONS[action]
    rec = make(world)
    response = role_client(world, role).post(f"{API}/recommendations/{rec.pk}/{path}", body,
                                            content_type="application/json")
    expected = allowed.get(role) or {"member": 403, "anonymous": 401}.get(role, 404)
    if role == "lead" and expected != 200:
        expected = 403  # a lead reads their team's recommendations but may not decide
    assert response.status_code == expected, response.content[:300]
    rec.refresh_from_db()
    if expected == 200:
        assert rec.status == after and response.json()["status"] == after
        assert AuditEntry.objects.filter(action=f"reclaim.{action}",
                                         object_id=str(rec.pk)).exists()
    else:
        assert_api_error(response, expected) if role != "anonymous" else None
        assert rec.status == make(world).status  # unchanged: same as a fresh one


BAD = {
    "dismiss": [({}, "reason"), ({"reason": "  "}, "reason"),
                ({"reason": "x", "snooze_s": -1}, "snooze_s"),
                ({"reason": "x", "snooze_s": "soon"}, "snooze_s"),
                ({"reason": "x" * 2001}, "reason")],
    "object": [({}, "reason"), ({"reason": ""}, "reason")],
    "uphold": [({"reason": "x" * 2001}, "reason")],
    "withdraw": [({"reason": "x" * 2001}, "reason")],
}


@pytest.mark.parametrize(("action", "case"), [(a, i) for a, cases in BAD.items()
                                              for i in range(len(cases))])
def test_bad_input_names_the_field(world, action, case):
    body, field = BAD[action][case]
    rec = {"dismiss": make_rec, "object": accepted, "uphold": objected,
           "withdraw": objected}[action](world)
    actor = "lead" if action == "object" else "admin"
    response = role_client(world, actor).post(f"{API}/recommendations/{rec.pk}/{action}", body,
                                             content_type="application/json")
    assert_api_error(response, 400, field)


def test_wrong_state_is_a_conflict_and_grace_ended_refuses_objection(world):
    admin = role_client(world, "admin")
    rec = accepted(world)
    assert_api_error(admin.post(f"{API}/recommendations/{rec.pk}/accept"), 409)
    assert_api_error(admin.post(f"{API}/recommendations/{rec.pk}/uphold"), 409)
    warning = make_rec(world, kind="coverage_warning")
    assert_api_error(admin.post(f"{API}/recommendations/{warning.pk}/accept"), 409)
    rec.grace_until = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    rec.save()
    response = role_client(world, "lead").post(f"{API}/recommendations/{rec.pk}/object",
                                              {"reason": "late"},
                                              content_type="application/json")
    assert_api_error(response, 409)
    assert_api_error(admin.get(f"{API}/recommendations?status=bogus"), 400, "status")
    assert_api_error(admin.get(f"{API}/recommendations?kind=bogus"), 400, "kind")
    assert_api_error(admin.get(f"{API}/recommendations/999999"), 404)


def test_an_exempt_recommendation_is_never_accepted(world):
    rec = make_rec(world)
    rec.exemption = Exemption.objects.create(reservation=rec.reservation, reason="benchmark",
                                             until=timezone.now() + timedelta(days=1),
                                             created_by=world.admin, created_at=timezone.now())
    rec.save()
    response = role_client(world, "admin").post(f"{API}/recommendations/{rec.pk}/accept")
    assert_api_error(response, 409)
    assert "exempt" in response.json()["detail"]
    listed = role_client(world, "admin").get(f"{API}/recommendations").json()["results"]
    assert listed[0]["exempt"] is True and listed[0]["exemption_reason"] == "benchmark"


@pytest.mark.parametrize("role", ROLES)
def test_bulk_accept(world, role, django_capture_on_commit_callbacks):
    a, b = make_rec(world), make_rec(world, status=S.DISMISSED)
    response = role_client(world, role).post(f"{API}/recommendations/bulk-accept",
                                            {"ids": [a.pk, b.pk, 999999]},
                                            content_type="application/json")
    if role != "admin":
        assert response.status_code == {"anonymous": 401}.get(role, 404)
        return
    body = response.json()
    assert body["accepted"] == [a.pk]
    assert [r["id"] for r in body["refused"]] == [b.pk, 999999]


@pytest.mark.parametrize("body", [{}, {"ids": []}, {"ids": ["x"]}, {"ids": 3}])
def test_bulk_accept_bad_input(world, body):
    response = role_client(world, "admin").post(f"{API}/recommendations/bulk-accept", body,
                                               content_type="application/json")
    assert_api_error(response, 400, "ids" if body else "ids")


@pytest.mark.parametrize("role", ROLES)
def test_self_release_by_role(world, role, django_capture_on_commit_callbacks):
    rec = make_rec(world)
    idle = rec.gpu_rows.get().gpu
    url = f"{API}/reservations/{rec.reservation_id}/release-idle"
    response = role_client(world, role).post(url)
    expected = {"admin": 200, "lead": 200, "member": 403, "anonymous": 401}.get(role, 404)
    assert response.status_code == expected, response.content[:300]
    assignment = Assignment.objects.get(reservation=rec.reservation, gpu=idle)
    rec.refresh_from_db()
    if expected == 200:
        assert rec.status == S.RELEASED and assignment.end_reason == "reclaimed"
        assert assignment.assigned_until <= timezone.now()
        rec.reservation.refresh_from_db()
        assert rec.reservation.count == 1 and rec.reservation.status == "active"
    else:
        assert rec.status == S.OPEN and assignment.end_reason == "scheduled"


def test_self_release_without_a_recommendation_is_a_conflict(world):
    reservation = world.reserve(count=1, start=timezone.now() - timedelta(days=1),
                                end=timezone.now() + timedelta(days=1), now=timezone.now())
    assert_api_error(role_client(world, "lead").post(
        f"{API}/reservations/{reservation.pk}/release-idle"), 409)
    assert_api_error(role_client(world, "lead").post(
        f"{API}/reservations/999999/release-idle"), 404)


@pytest.mark.parametrize("role", ROLES)
def test_exemptions_are_for_admins(world, role):
    client = role_client(world, role)
    until = (timezone.now() + timedelta(days=3)).isoformat()
    response = client.post(f"{API}/exemptions", {"team": "vision", "gpu_class": "H100-80GB",
                                                 "reason": "benchmarks", "until": until},
                           content_type="application/json")
    if role != "admin":
        assert response.status_code == {"anonymous": 401}.get(role, 404)
        assert client.get(f"{API}/exemptions").status_code == {"anonymous": 401}.get(role, 404)
        return
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert [e["id"] for e in client.get(f"{API}/exemptions").json()] == [pk]
    assert client.patch(f"{API}/exemptions/{pk}", {"reason": "benchmarks, week 2"},
                        content_type="application/json").json()["reason"] == "benchmarks, week 2"
    ended = client.delete(f"{API}/exemptions/{pk}")
    assert ended.status_code == 200
    assert Exemption.objects.get(pk=pk).until <= timezone.now()
    assert_api_error(client.delete(f"{API}/exemptions/{pk}"), 409)


@pytest.mark.parametrize(("body", "field"), [
    ({"reason": "x", "until": "2030-01-01T00:00:00"}, "until"),            # naive
    ({"team": "vision", "gpu_class": "H100-80GB", "reason": "x",
      "until": "2020-01-01T00:00:00Z"}, "until"),                           # in the past
    ({"team": "vision", "reason": "x", "until": "2030-01-01T00:00:00Z"}, "team"),
    ({"team": "nope", "gpu_class": "H100-80GB", "reason": "x",
      "until": "2030-01-01T00:00:00Z"}, "team"),
    ({"team": "vision", "gpu_class": "H100-80GB", "reason": "",
      "until": "2030-01-01T00:00:00Z"}, "reason"),
    ({"reservation": 999999, "reason": "x", "until": "2030-01-01T00:00:00Z"}, "reservation"),
])
def test_exemption_bad_input(world, body, field):
    response = role_client(world, "admin").post(f"{API}/exemptions", body,
                                               content_type="application/json")
    assert_api_error(response, 400, field)


def test_exemption_for_a_reservation_and_a_team_both_is_refused(world):
    rec = make_rec(world)
    response = role_client(world, "admin").post(f"{API}/exemptions", {
        "reservation": rec.reservation_id, "team": "vision", "gpu_class": "H100-80GB",
        "reason": "x", "until": "2030-01-01T00:00:00Z"}, content_type="application/json")
    assert_api_error(response, 400, "reservation")


@pytest.mark.parametrize("role", ROLES)
def test_backtest_and_figures_are_for_admins(world, role):
    client = role_client(world, role)
    backtest = client.get(f"{API}/backtest?days=7&idle_busy_fraction=0.2&lookback_hours=12")
    figures = client.get(f"{API}/figures")
    if role != "admin":
        expected = {"anonymous": 401}.get(role, 404)
        assert backtest.status_code == expected and figures.status_code == expected
        return
    body = backtest.json()
    assert body["policy"]["idle_busy_fraction"] == "0.2000"
    assert body["policy"]["lookback_hours"] == 12 and body["recommendations"] == 0
    assert figures.json()["reclaimable_gpus"] == 0


@pytest.mark.parametrize("query", ["days=0", "days=91", "days=x", "idle_busy_fraction=2",
                                   "min_coverage=-1", "lookback_hours=0", "grace_hours=-1"])
def test_backtest_bad_input(world, query):
    response = role_client(world, "admin").get(f"{API}/backtest?{query}")
    assert_api_error(response, 400, query.split("=")[0])


def test_the_schema_lists_every_reclaim_endpoint(world):
    schema = role_client(world, "admin").get("/api/schema/?format=json").json()
    paths = [p for p in schema["paths"] if p.startswith("/api/v1/reclaim/")]
    assert len(paths) == 13
