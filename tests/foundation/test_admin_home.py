"""The admin's home page shows what waits for them, each item counted and linked to where
it is done (every app contributes through `gpuquota.core.attention`); `/manage/` lists
every admin page; the menu groups the admin pages so the header stays one line."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from gpuquota.core.attention import attention_items
from gpuquota.ingest.health import gpu_health_interval_record
from gpuquota.inventory.models import GpuHealthInterval, Node
from gpuquota.reservations.services import reservation_create
from reclaim.models import Recommendation
from reports.models import Statement
from tests.reclaim.factories import World, make_rec

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _draft(team, month, total, currency="USD", error=""):
    now = timezone.now().replace(microsecond=0)
    return Statement.objects.create(
        team=team, month=month, total=total, currency=currency, error=error,
        team_name=team.name, team_slug=team.slug, computed_at=now, computed_until=now)


@pytest.fixture
def busy_world(settings):
    """One of everything an admin acts on."""
    settings.SETTLEMENT_DELAY_HOURS = 0
    world = World.create(gpus=8)
    now = timezone.now().replace(microsecond=0)
    make_rec(world)  # open
    make_rec(world, status="objected", objection_by=world.lead, objection_at=now,
             objection_reason="needed", accepted_at=now, accepted_by=world.admin,
             grace_until=now + timedelta(hours=1))
    reservation_create(team=world.team, gpu_class=world.gpu_class, count=1,
                       start=now + timedelta(days=1), end=now + timedelta(days=2),
                       requested_by=world.lead, purpose="over quota")  # waits for approval
    last_month = (now.replace(day=1) - timedelta(days=1)).replace(day=1).date()
    _draft(world.team, last_month, "1200.50")
    _draft(world.other_team, last_month, "99.50")
    gpu_health_interval_record(gpu=world.gpus[7], state=GpuHealthInterval.State.FAILED,
                               valid_from=now - timedelta(hours=1), valid_until=None,
                               by=world.admin, reason="fell off the bus")
    Node.objects.update(last_seen_at=now)
    Node.objects.create(cluster=world.gpus[0].node.cluster, hostname="quiet-node",
                        last_seen_at=now - timedelta(hours=2))
    return world


def test_every_app_says_what_waits_for_an_admin(busy_world):
    items = {item.key: item for item in attention_items(now=timezone.now())}
    counts = {key: item.count for key, item in items.items()}
    assert counts == {"approvals": 1, "drafts": 2, "unsent": 0, "objections": 1,
                      "recommendations": 1, "failed_gpus": 1, "silent_nodes": 1,
                      "scheduler_problems": 0, "foreign_use": 0}
    assert items["drafts"].url.startswith("/statements/review/?month=")
    assert "1,300.00 USD" in items["drafts"].detail
    assert items["recommendations"].detail == "saves 120.00 USD"
    assert items["failed_gpus"].url == "/fleet/?health=failed"
    keys = [item.key for item in attention_items(now=timezone.now())]
    assert keys.index("unsent") > keys.index("silent_nodes")  # nothing to do: last


def test_the_admins_home_page_shows_them_linked(busy_world):
    page = _client(busy_world.admin).get("/")
    body = page.content.decode()
    assert page.status_code == 200 and "What needs you" in body
    for key, url in [("approvals", "/reservations/pending/"),
                     ("objections", "/reclaim/#objected"), ("recommendations", "/reclaim/#open"),
                     ("failed_gpus", "/fleet/?health=failed"),
                     ("silent_nodes", "/fleet/?problems=1")]:
        assert f'id="attention-{key}"' in body
        assert f'href="{url}"' in body
    assert "6 things to look at" in body
    for url in ("/reservations/pending/", "/reclaim/", "/fleet/?health=failed",
                "/fleet/?problems=1"):
        assert _client(busy_world.admin).get(url).status_code == 200, url


@pytest.mark.parametrize("who", ["lead", "member"])
def test_others_see_their_teams_not_the_admins_list(busy_world, who):
    user = getattr(busy_world, who)
    body = _client(user).get("/", follow=True).content.decode()
    assert "What needs you" not in body and "attention-" not in body


def test_nothing_waiting_says_so(roles):
    body = _client(roles.admin).get("/").content.decode()
    assert "Nothing waits for an admin right now." in body


def test_manage_is_a_page_listing_every_admin_page(roles):
    page = _client(roles.admin).get("/manage/")
    body = page.content.decode()
    assert page.status_code == 200 and "Administration" in body
    for url in ("/statements/review/", "/manage/rate-cards/", "/ingest/nodes/", "/reclaim/",
                "/reservations/maintenance/", "/reservations/pending/", "/manage/quotas/",
                "/schedulers/",
                "/manage/reservations/", "/reservations/backfill/", "/admin/"):
        assert f'href="{url}"' in body, url
    for who in ("lead", "member", "outsider"):
        assert _client(getattr(roles, who)).get("/manage/").status_code == 404
    assert Client().get("/manage/").status_code == 302  # to the login page


def test_the_admin_pages_are_grouped_in_the_menu(roles):
    body = _client(roles.admin).get("/manage/").content.decode()
    for group in ("billing", "operations", "manage"):
        assert f'id="nav-{group}"' in body
    assert 'class="navgroup active" id="nav-manage"' in body
    lead = _client(roles.lead).get(f"/teams/{roles.team.slug}/").content.decode()
    assert "nav-billing" not in lead and 'href="/manage/"' not in lead


def test_an_admin_without_teams_is_still_an_admin(db):
    admin = User.objects.create_user("root", is_staff=True)
    assert "Nothing waits" in _client(admin).get("/").content.decode()
    assert Recommendation.objects.count() == 0
