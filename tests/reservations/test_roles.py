"""The role matrix: every page and endpoint of reservations against every role."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu

pytestmark = pytest.mark.django_db
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]


@pytest.fixture
def world(roles):
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory(hostname="h100-a")
    for i in range(4):
        make_gpu(node=node, gpu_class=gpu_class, index=i)
    QuotaFactory(team=roles.team, gpu_class=gpu_class, gpus=2)
    QuotaFactory(team=roles.other_team, gpu_class=gpu_class, gpus=1)
    now = timezone.now().replace(microsecond=0)
    upcoming = reservation_create(team=roles.team, gpu_class=gpu_class, count=1,
                                  start=now + timedelta(days=1), end=now + timedelta(days=2),
                                  requested_by=roles.lead)
    current = reservation_create(team=roles.team, gpu_class=gpu_class, count=1, start=now,
                                 end=now + timedelta(days=2), requested_by=roles.lead)
    pending = reservation_create(team=roles.team, gpu_class=gpu_class, count=3,
                                 start=now + timedelta(days=3), end=now + timedelta(days=4),
                                 requested_by=roles.lead)
    assert pending.status == "pending"
    return {"roles": roles, "gpu_class": gpu_class, "upcoming": upcoming, "current": current,
            "pending": pending, "now": now}


def client_for(world, role) -> Client:
    client = Client()
    user = world["roles"].users()[role]
    if role != "anonymous":
        client.force_login(user)
    return client


def _check_page(response, expected):
    if expected == "login":
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    else:
        assert response.status_code == expected, response.content[:300]


PAGES = {
    "team": ("/teams/vision/", {"admin": 200, "lead": 200, "other_lead": 404, "member": 200,
                                "outsider": 404, "anonymous": "login"}),
    "new": ("/reservations/new/", {"admin": 200, "lead": 200, "other_lead": 200, "member": 403,
                                   "outsider": 403, "anonymous": "login"}),
    "pending": ("/reservations/pending/", {"admin": 200, "lead": 404, "other_lead": 404,
                                           "member": 404, "outsider": 404, "anonymous": "login"}),
    "backfill": ("/reservations/backfill/", {"admin": 200, "lead": 404, "other_lead": 404,
                                             "member": 404, "outsider": 404,
                                             "anonymous": "login"}),
    "maintenance": ("/reservations/maintenance/", {"admin": 200, "lead": 404, "other_lead": 404,
                                                   "member": 404, "outsider": 404,
                                                   "anonymous": "login"}),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", PAGES)
def test_pages(world, page, role):
    url, expected = PAGES[page]
    _check_page(client_for(world, role).get(url), expected[role])


@pytest.mark.parametrize("role", ROLES)
def test_team_page_shows_buttons_only_to_leads_and_admins(world, role):
    response = client_for(world, role).get("/teams/vision/")
    if response.status_code != 200:
        return
    html = response.content.decode()
    assert "h100-a/" in html  # GPUs listed by node/index
    has_buttons = "Release</button>" in html and "Cancel</button>" in html
    assert has_buttons == (role in ("admin", "lead"))


TEAM_ACTIONS = {"admin": 302, "lead": 302, "other_lead": 404, "member": 403, "outsider": 404,
                "anonymous": "login"}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ["cancel", "release", "extend"])
def test_team_actions(world, action, role):
    target = world["current"] if action == "release" else world["upcoming"]
    data = {"end": (timezone.localtime(target.end) + timedelta(hours=5)).strftime(
        "%Y-%m-%dT%H:%M")}
    old_end = target.end
    response = client_for(world, role).post(f"/reservations/{target.pk}/{action}/", data)
    _check_page(response, TEAM_ACTIONS[role])
    target.refresh_from_db()
    changed = {"cancel": target.status == "cancelled", "release": target.status == "ended",
               "extend": target.end > old_end}[action]
    assert changed == (role in ("admin", "lead"))


@pytest.mark.parametrize("role", ROLES)
def test_decide_pending(world, role):
    pending = world["pending"]
    response = client_for(world, role).post(f"/reservations/{pending.pk}/decide/",
                                            {"decision": "deny", "reason": "budget"})
    _check_page(response, {"admin": 302, "anonymous": "login"}.get(role, 404))
    pending.refresh_from_db()
    assert (pending.status == "denied") == (role == "admin")


# --- API ------------------------------------------------------------------------------------

API_READ = {"admin": 200, "lead": 200, "other_lead": 404, "member": 200, "outsider": 404,
            "anonymous": 401}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url", ["/api/v1/teams", "/api/v1/gpu-classes", "/api/v1/availability",
                                 "/api/v1/reservations", "/api/v1/audit"])
def test_api_lists(world, url, role):
    response = client_for(world, role).get(url)
    assert response.status_code == (401 if role == "anonymous" else 200)


@pytest.mark.parametrize("role", ROLES)
def test_api_lists_show_only_visible_teams(world, role):
    client = client_for(world, role)
    if role == "anonymous":
        return
    sees_vision = role in ("admin", "lead", "member")
    teams = [t["slug"] for t in client.get("/api/v1/teams").json()["results"]]
    assert ("vision" in teams) == sees_vision
    rows = client.get("/api/v1/reservations").json()["results"]
    assert bool(rows) == sees_vision
    audit = client.get("/api/v1/audit").json()["results"]
    assert any(e["team"] == "vision" for e in audit) == sees_vision


@pytest.mark.parametrize("role", ROLES)
def test_api_reservation_detail(world, role):
    response = client_for(world, role).get(f"/api/v1/reservations/{world['upcoming'].pk}")
    assert response.status_code == API_READ[role]
    if response.status_code == 200:
        body = response.json()
        assert body["status"] == "scheduled" and body["assignments"][0]["node"] == "h100-a"


@pytest.mark.parametrize("role", ROLES)
def test_api_create(world, role):
    start = world["now"] + timedelta(days=5)
    payload = {"team": "vision", "gpu_class": "H100-80GB", "count": 1,
               "start": start.isoformat(), "end": (start + timedelta(hours=4)).isoformat()}
    response = client_for(world, role).post("/api/v1/reservations", payload,
                                            content_type="application/json")
    expected = {"admin": 201, "lead": 201, "member": 403}.get(role, API_READ[role])
    assert response.status_code == expected, response.content
    created = Reservation.objects.filter(start=start).exists()
    assert created == (expected == 201)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ["cancel", "release", "extend"])
def test_api_team_actions(world, action, role):
    target = world["current"] if action == "release" else world["upcoming"]
    payload = {"end": (target.end + timedelta(hours=3)).isoformat()} if action == "extend" else {}
    response = client_for(world, role).post(f"/api/v1/reservations/{target.pk}/{action}",
                                            payload, content_type="application/json")
    expected = {"admin": 200, "lead": 200, "member": 403}.get(role, API_READ[role])
    assert response.status_code == expected, response.content


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ["approve", "deny"])
def test_api_decisions_are_for_admins(world, action, role):
    pending = world["pending"]
    response = client_for(world, role).post(f"/api/v1/reservations/{pending.pk}/{action}",
                                            {"reason": "ok"}, content_type="application/json")
    expected = {"admin": 200, "anonymous": 401}.get(role, 404)
    assert response.status_code == expected, response.content
    pending.refresh_from_db()
    decided = {"approve": "scheduled", "deny": "denied"}[action]
    assert (pending.status == decided) == (role == "admin")


def test_audit_records_every_change_with_who_and_why(world):
    roles = world["roles"]
    client = client_for(world, "lead")
    client.post(f"/api/v1/reservations/{world['upcoming'].pk}/cancel", {"reason": "plans changed"},
                content_type="application/json")
    entry = AuditEntry.objects.get(action="reservation.cancel")
    assert entry.actor == roles.lead and entry.reason == "plans changed"
    assert entry.changes == {"status": ["scheduled", "cancelled"]}


@pytest.mark.parametrize("role", ROLES)
def test_api_shrink_and_swap(world, role):
    roles = world["roles"]
    wide = reservation_create(team=roles.team, gpu_class=world["gpu_class"], count=2,
                              start=world["now"] + timedelta(days=10),
                              end=world["now"] + timedelta(days=11), requested_by=roles.admin)
    client = client_for(world, role)
    gpu = wide.assignments.first().gpu
    swap = client.post(f"/api/v1/reservations/{wide.pk}/swap", {"gpu": gpu.uuid.upper()},
                       content_type="application/json")
    shrink = client.post(f"/api/v1/reservations/{wide.pk}/shrink", {"count": 1},
                         content_type="application/json")
    expected = {"admin": 200, "lead": 200, "member": 403}.get(role, API_READ[role])
    assert swap.status_code == expected and shrink.status_code == expected, swap.content
    if expected == 200:
        body = shrink.json()
        assert body["count"] == 1
        assert gpu.uuid not in [a["gpu"] for a in body["assignments"]
                                if a["assigned_until"] > a["assigned_from"]]


def test_api_token_auth_works_for_reservations(world):
    from accounts.models import ApiToken
    from gpuquota.core.tokens import token_generate

    token = token_generate("u")
    ApiToken.objects.create(user=world["roles"].lead, name="ci", prefix=token.prefix,
                            key_hash=token.key_hash)
    response = Client().get("/api/v1/reservations", HTTP_AUTHORIZATION=f"Bearer {token.key}")
    assert response.status_code == 200
    assert {r["team"] for r in response.json()["results"]} == {"vision"}
