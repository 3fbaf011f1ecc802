"""Fleet pages against every role, bounded queries, the admin recovery button, /metrics."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.services import dirty_hours_process
from tests.factories import NodeFactory, make_gpu
from tests.usage.factories import add_processes, minute_samples, reserve

pytestmark = pytest.mark.django_db
ROLES = ["admin", "lead", "other_lead", "member", "outsider"]


def fleet_data(roles, nodes: int, gpus_per_node: int):
    """Nodes with GPUs reporting the last 90 minutes; the first GPU reserved by `vision`."""
    now = timezone.now().replace(microsecond=0)
    start = hour_floor(now) - timedelta(hours=1)
    gpus = []
    for n in range(nodes):
        node = NodeFactory(last_seen_at=now if n else now - timedelta(hours=1))
        for i in range(gpus_per_node):
            gpu = make_gpu(node=node, index=i, at=start - timedelta(days=1))
            minute_samples(gpu, start, int((now - start).total_seconds() // 60), util=40 + i)
            add_processes(gpu, start, 5, user="alice")
            gpus.append(gpu)
    reserve(roles.team, gpus[0], start, now + timedelta(hours=5))
    dirty_hours_process()
    return gpus


def login(client, roles, role):
    if role != "anonymous":
        client.force_login(getattr(roles, role))


@pytest.mark.parametrize("role", ROLES)
def test_fleet_page_every_signed_in_user_sees_hardware_not_other_teams(client, roles, role):
    fleet_data(roles, 2, 2)
    login(client, roles, role)
    response = client.get(reverse("fleet"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "agent silent" in body and "healthy" in body and "40.00%" in body
    sees_team = role in ("admin", "lead", "member")
    assert ("Vision" in body.split("<main")[1]) == sees_team
    assert ("another team" in body) == (not sees_team)


def test_pages_need_sign_in(client, roles):
    gpus = fleet_data(roles, 1, 1)
    for url in (reverse("fleet"), reverse("fleet_utilization"),
                reverse("gpu_detail", args=[gpus[0].uuid])):
        assert client.get(url).status_code == 302


@pytest.mark.parametrize("role", ROLES)
def test_gpu_detail(client, roles, role):
    gpus = fleet_data(roles, 1, 1)
    GpuHealthInterval.objects.create(gpu=gpus[0], state="degraded", reason="xid 63",
                                     valid_from=timezone.now() - timedelta(hours=1))
    login(client, roles, role)
    response = client.get(reverse("gpu_detail", args=["GPU-" + gpus[0].uuid[4:].upper()]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "<svg" in body and "Mean GPU utilization per hour" in body
    assert ("Mark recovered" in body) == (role == "admin")
    assert ("alice" in body) == (role in ("admin", "lead", "member"))
    assert client.get(reverse("gpu_detail", args=["GPU-nope"])).status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_utilization_page(client, roles, role):
    fleet_data(roles, 1, 2)
    login(client, roles, role)
    response = client.get(reverse("fleet_utilization"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "H100-80GB" in body and "Fleet utilization" in body
    assert ("Unreserved busy hours per owner team" in body) == (role == "admin")
    assert client.get(reverse("fleet_utilization") + "?month=2026-13").status_code == 404


@pytest.mark.parametrize("sizes", [(1, 1), (4, 4)])
def test_pages_run_bounded_queries(client, roles, sizes, django_assert_max_num_queries):
    gpus = fleet_data(roles, *sizes)
    client.force_login(roles.admin)
    with django_assert_max_num_queries(16):
        assert client.get(reverse("fleet")).status_code == 200
    with django_assert_max_num_queries(16):
        assert client.get(reverse("gpu_detail", args=[gpus[0].uuid])).status_code == 200
    with django_assert_max_num_queries(60):
        assert client.get(reverse("fleet_utilization")).status_code == 200


@pytest.mark.parametrize("role", ["lead", "member", "other_lead", "outsider"])
def test_recover_is_for_admins_only(client, roles, role):
    gpu = make_gpu()
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", reason="gpu_lost",
                                     valid_from=timezone.now() - timedelta(hours=3))
    login(client, roles, role)
    response = client.post(reverse("gpu_recover", args=[gpu.uuid]), {"at": "2026-01-01 00:00"})
    assert response.status_code == 404
    assert GpuHealthInterval.objects.get(gpu=gpu).valid_until is None


def test_admin_recovers_with_a_past_time_in_their_time_zone(client, roles):
    gpu = make_gpu()
    roles.admin.timezone = "Europe/Berlin"
    roles.admin.save()
    began = timezone.now().replace(microsecond=0) - timedelta(days=2)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", reason="gpu_lost", valid_from=began)
    client.force_login(roles.admin)
    local = (began + timedelta(hours=1)).astimezone(ZoneInfo("Europe/Berlin"))
    response = client.post(reverse("gpu_recover", args=[gpu.uuid]),
                           {"at": local.strftime("%Y-%m-%d %H:%M:%S"), "note": "reseated"},
                           follow=True)
    assert "Recovery recorded" in response.content.decode()
    assert GpuHealthInterval.objects.get(gpu=gpu).valid_until == began + timedelta(hours=1)


def test_metrics(client, roles):
    fleet_data(roles, 2, 1)
    minute_samples(make_gpu(), hour_floor(timezone.now()) - timedelta(hours=3), 1)
    body = client.get("/metrics").content.decode()
    assert "gpuquota_samples_stored_5m" in body
    assert "gpuquota_outbox_dirty_gpu_hours 1.0" in body
    assert "gpuquota_agents_silent 2.0" in body  # the stale node and the new GPU's node
    assert "gpuquota_outbox_lag_seconds" in body


@pytest.mark.parametrize("role", ["admin", "lead", "member"])
def test_team_page_shows_reserved_versus_busy_per_reservation(client, roles, role):
    fleet_data(roles, 1, 1)
    login(client, roles, role)
    body = client.get(reverse("team_detail", args=["vision"])).content.decode()
    assert "Reserved versus busy" in body and 'id="reservation-utilization"' in body


def test_team_page_runs_bounded_queries(client, roles, django_assert_max_num_queries):
    for size in (1, 3):
        fleet_data(roles, 1, size)
        client.force_login(roles.lead)
        with django_assert_max_num_queries(80):
            assert client.get(reverse("team_detail", args=["vision"])).status_code == 200


@pytest.mark.redis
def test_metrics_queue_depth_reads_the_celery_list(client, settings):
    import redis

    from gpuquota.usage.metrics import CELERY_QUEUE

    settings.REDIS_URL = __import__("os").environ["REDIS_URL"]
    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.delete(CELERY_QUEUE)
    broker.rpush(CELERY_QUEUE, "a", "b", "c")
    try:
        assert "gpuquota_celery_queue_depth 3.0" in client.get("/metrics").content.decode()
    finally:
        broker.delete(CELERY_QUEUE)


def test_demo_catch_up_drains_the_outbox():
    from gpuquota.usage.demo import demo_usage_catch_up

    minute_samples(make_gpu(), hour_floor(timezone.now()) - timedelta(hours=2), 90)
    assert demo_usage_catch_up() == 2
    assert demo_usage_catch_up() == 0
