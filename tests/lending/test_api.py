"""The lending API against the role matrix, and bad input on every endpoint: one JSON
error format, a 4xx, never a 500, nothing half-written."""

import pytest

from gpuquota.core.models import AuditEntry
from gpuquota.lending.models import LendingOptOut
from gpuquota.lending.services import loan_lend, loan_return, loan_return_observed
from gpuquota.reservations.models import Loan
from tests.helpers import assert_api_error, role_client
from tests.lending.factories import MIN, World

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]
API = "/api/v1/lending"
READERS, ACTORS = ("admin", "lead", "member"), ("admin", "lead")


@pytest.fixture
def world():
    return World.create()


@pytest.fixture
def reservation(world):
    return world.reserve(count=2, start=_now() - 60 * MIN, end=_now() + 600 * MIN)


def _now():
    from django.utils import timezone

    return timezone.now().replace(microsecond=0)


def _lend(reservation, at=None):
    return loan_lend(assignment=reservation.assignments.order_by("gpu_id").first(), at=at)


@pytest.mark.parametrize("role", ROLES)
def test_read_loans_pool_and_policy(world, reservation, role):
    loan = _lend(reservation)
    client = role_client(world, role)
    listed, detail = client.get(f"{API}/loans"), client.get(f"{API}/loans/{loan.pk}")
    pool, policy = client.get(f"{API}/pool"), client.get(f"{API}/policy")
    if role == "anonymous":
        assert {r.status_code for r in (listed, detail, pool, policy)} == {401}
        return
    can_read = role in READERS
    assert [r["id"] for r in listed.json()["results"]] == ([loan.pk] if can_read else [])
    assert detail.status_code == (200 if can_read else 404)
    if can_read:
        assert detail.json()["team"] == "vision" and detail.json()["returned_at"] is None
    [lent] = pool.json()  # where preemptible work may run: every signed-in user sees it
    assert (lent["gpu"], lent["advisory"]) == (loan.gpu.uuid, True) and "team" not in lent
    assert policy.json()["return_notice_s"] == 300


@pytest.mark.parametrize("role", ROLES)
def test_return_now(world, reservation, role):
    loan = _lend(reservation)
    response = role_client(world, role).post(f"{API}/loans/{loan.pk}/return", {"note": "mine"},
                                            content_type="application/json")
    loan.refresh_from_db()
    if role == "anonymous":
        assert response.status_code == 401
    elif role in ACTORS:
        assert response.status_code == 200, response.content
        assert response.json()["end_reason"] == loan.end_reason
        assert loan.end_reason == ("owner_ask" if role == "lead" else "admin")
        assert AuditEntry.objects.get(action="loan.return").actor == getattr(world, role)
        return
    else:
        assert_api_error(response, 403 if role == "member" else 404)
    assert loan.returned_at is None


@pytest.mark.parametrize("role", ROLES)
def test_lend_now(world, reservation, role):
    response = role_client(world, role).post(f"{API}/lend-now", {"reservation": reservation.pk},
                                            content_type="application/json")
    if role == "anonymous":
        assert response.status_code == 401
    elif role in ACTORS:
        assert response.status_code == 201, response.content
        assert Loan.objects.get().lent_by == getattr(world, role)
        return
    else:
        assert_api_error(response, 403 if role == "member" else 404)
    assert not Loan.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_opt_out_and_back_in(world, reservation, role):
    loan = _lend(reservation)
    client = role_client(world, role)
    response = client.post(f"{API}/opt-outs", {"scope": "reservation",
                                               "reservation": reservation.pk,
                                               "reason": "benchmark <b>"},
                           content_type="application/json")
    if role == "anonymous":
        assert response.status_code == 401
        return
    if role not in ACTORS:
        assert_api_error(response, 403 if role == "member" else 404)
        assert not LendingOptOut.objects.exists()
        return
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["reason"] == "benchmark <b>" and body["ended_at"] is None
    loan.refresh_from_db()
    assert loan.end_reason == "lending_off"
    assert [o["id"] for o in client.get(f"{API}/opt-outs?live=1").json()] == [body["id"]]
    ended = client.post(f"{API}/opt-outs/{body['id']}/end")
    assert ended.status_code == 200 and ended.json()["ended_at"]
    team_class = client.post(f"{API}/opt-outs", {"scope": "team_class", "team": "vision",
                                                 "gpu_class": "H100-80GB", "reason": "x"},
                             content_type="application/json")
    assert team_class.status_code == 201, team_class.content


def test_others_cannot_end_a_teams_opt_out(world, reservation):
    role_client(world, "lead").post(f"{API}/opt-outs", {
        "scope": "reservation", "reservation": reservation.pk, "reason": "benchmark"},
        content_type="application/json")
    optout = LendingOptOut.objects.get()
    assert_api_error(role_client(world, "member").post(f"{API}/opt-outs/{optout.pk}/end"), 403)
    assert_api_error(role_client(world, "other_lead").post(f"{API}/opt-outs/{optout.pk}/end"), 404)
    assert [o.ended_at for o in LendingOptOut.objects.all()] == [None]


@pytest.mark.parametrize("role", ROLES)
def test_returns_and_their_quantiles_are_for_admins(world, reservation, role):
    loan = _lend(reservation, at=_now() - 20 * MIN)
    loan = loan_return(loan=loan, reason="owner_ask", at=loan.lent_from + 10 * MIN)
    loan_return_observed(loan=loan, freed_at=loan.returned_at + 2 * MIN)
    response = role_client(world, role).get(f"{API}/returns")
    if role == "anonymous":
        assert response.status_code == 401
    elif role == "admin":
        body = response.json()
        assert (body["returns"], body["p50_s"], body["p99_s"]) == (1, 120, 120)
        assert body["loans"][0]["time_to_return_s"] == 120
    else:
        assert_api_error(response, 404)


@pytest.mark.parametrize("method,path,payload,status,field", [
    ("post", "/lend-now", {}, 400, "reservation"),
    ("post", "/lend-now", {"reservation": "x"}, 400, "reservation"),
    ("post", "/lend-now", {"reservation": 0}, 400, "reservation"),
    ("post", "/lend-now", {"reservation": 999999}, 404, None),
    ("post", "/lend-now", {"reservation": "R", "gpu": "GPU-nope"}, 400, "gpu"),
    ("post", "/lend-now", {"reservation": "R", "reason": "x" * 300}, 400, "reason"),
    ("post", "/loans/999999/return", {}, 404, None),
    ("post", "/loans/L/return", {"note": "x" * 300}, 400, "note"),
    ("post", "/opt-outs", {}, 400, "scope"),
    ("post", "/opt-outs", {"scope": "everything", "reason": "x"}, 400, "scope"),
    ("post", "/opt-outs", {"scope": "reservation", "reason": "x"}, 400, "reservation"),
    ("post", "/opt-outs", {"scope": "reservation", "reservation": "R"}, 400, "reason"),
    ("post", "/opt-outs", {"scope": "reservation", "reservation": "R", "reason": " "}, 400,
     "reason"),
    ("post", "/opt-outs", {"scope": "team_class", "reason": "x"}, 400, "team"),
    ("post", "/opt-outs", {"scope": "team_class", "team": "vision", "gpu_class": "nope",
                           "reason": "x"}, 400, "gpu_class"),
    ("post", "/opt-outs", {"scope": "team_class", "team": "nope", "gpu_class": "H100-80GB",
                           "reason": "x"}, 404, None),
    ("post", "/opt-outs/999999/end", {}, 404, None),
    ("get", "/loans?state=lost", None, 400, "state"),
    ("get", "/loans?team=nope", None, 404, None),
    ("get", "/returns?start=2026-13-01T00:00:00Z", None, 400, "start"),
    ("get", "/returns?start=2026-12-01T00:00:00", None, 400, "start"),
    ("get", "/returns?start=2026-12-02T00:00:00Z&end=2026-12-01T00:00:00Z", None, 400, "end"),
])
def test_bad_input(world, reservation, method, path, payload, status, field):
    loan = _lend(reservation)
    path = path.replace("/L/", f"/{loan.pk}/")
    if payload and payload.get("reservation") == "R":
        payload["reservation"] = reservation.pk
    client = role_client(world, "admin")
    if method == "post":
        response = client.post(f"{API}{path}", payload, content_type="application/json")
    else:
        response = client.get(f"{API}{path}")
    assert_api_error(response, status, field)
    assert Loan.objects.count() == 1 and Loan.objects.get().returned_at is None
    assert not LendingOptOut.objects.exists()


def test_lend_now_refusals_name_the_reason(world, reservation):
    client = role_client(world, "lead")
    for _ in range(2):
        assert client.post(f"{API}/lend-now", {"reservation": reservation.pk},
                           content_type="application/json").status_code == 201
    assert_api_error(client.post(f"{API}/lend-now", {"reservation": reservation.pk},
                             content_type="application/json"), 409, "gpu")
    gpu = Loan.objects.first().gpu
    assert_api_error(client.post(f"{API}/lend-now", {"reservation": reservation.pk,
                                                 "gpu": gpu.uuid},
                             content_type="application/json"), 409, "gpu")
    client.post(f"{API}/opt-outs", {"scope": "reservation", "reservation": reservation.pk,
                                    "reason": "benchmark"}, content_type="application/json")
    assert_api_error(client.post(f"{API}/lend-now", {"reservation": reservation.pk},
                             content_type="application/json"), 409, "reservation")
