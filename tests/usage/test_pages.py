"""Fleet pages against every role, bounded queries, the admin recovery button, /metrics."""

import re
import uuid
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import NodeFactory, TeamFactory, make_gpu
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
    # 16, reclaim's two (three when nothing is reclaimable: its currency), freshness, telemetry's
    with django_assert_max_num_queries(25):  # the summary counted by the page: no beat
        assert client.get(reverse("fleet")).status_code == 200
    # a fresh install's first read computes the reliability figures once (its section):
    # the bound is of the reads after, from the snapshot
    assert client.get(reverse("gpu_detail", args=[gpus[0].uuid])).status_code == 200
    with django_assert_max_num_queries(16):
        assert client.get(reverse("gpu_detail", args=[gpus[0].uuid])).status_code == 200
    for query in ("", "?last=24h", "?month=2026-10"):  # one query over the rollups each
        with django_assert_max_num_queries(20):
            assert client.get(reverse("fleet_utilization") + query).status_code == 200


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


def test_metrics(client, roles, settings):
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"  # the test client's address
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


def test_team_page_runs_bounded_queries(client, roles):
    """The same number of queries whatever the team holds: each app's section (holds and
    jobs, foreign use, loans, lent hours, statements, reclaim) reads in a query or two."""
    counts = []
    for size in (1, 3):
        fleet_data(roles, 1, size)
        client.force_login(roles.lead)
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("team_detail", args=["vision"])).status_code == 200
        counts.append(len(queries))
    # 37 for the sections before the budget; the budget's month to date and forecast are two
    # statement drafts over the rollups (to the last whole hour: no raw samples), ~32 more
    assert counts[0] == counts[1] <= 72, counts


@pytest.mark.redis
def test_metrics_queue_depth_reads_the_celery_list(client, settings):
    import redis

    from gpuquota.usage.metrics import CELERY_QUEUE

    settings.REDIS_URL = __import__("os").environ["REDIS_URL"]
    settings.METRICS_ALLOWED_NETWORKS = "127.0.0.0/8"  # the test client's address
    broker = redis.Redis.from_url(settings.REDIS_URL)
    ours = [f"queue-depth-test-{uuid.uuid4()}" for _ in range(3)]
    before = broker.llen(CELERY_QUEUE)  # whatever else waits there stays, and is counted
    broker.rpush(CELERY_QUEUE, *ours)
    try:
        metrics = client.get("/metrics").content.decode()
        assert f"gpuquota_celery_queue_depth {before + 3}.0" in metrics
    finally:
        for message in ours:
            broker.lrem(CELERY_QUEUE, 1, message)


def test_demo_catch_up_drains_the_outbox():
    from gpuquota.demo.usage import demo_usage_catch_up

    minute_samples(make_gpu(), hour_floor(timezone.now()) - timedelta(hours=2), 90)
    assert demo_usage_catch_up() == 2
    assert demo_usage_catch_up() == 0


def small_fleet():
    """n1: three reporting GPUs (80 % reserved, 20 % degraded, 50 % failed); n2: silent, one
    GPU still with recent windows (90 %); n3: one healthy reserved GPU at 10 %."""
    now = timezone.now().replace(microsecond=0)
    start = hour_floor(now) - timedelta(hours=1)
    minutes = int((now - start).total_seconds() // 60)
    hosts = {"n1": now, "n2": now - timedelta(hours=2), "n3": now}
    nodes = {h: NodeFactory(hostname=h, last_seen_at=seen) for h, seen in hosts.items()}
    gpus = {}
    for name, host, index, util in [("a", "n1", 0, 80), ("b", "n1", 1, 20), ("c", "n1", 2, 50),
                                     ("d", "n2", 0, 90), ("e", "n3", 0, 10)]:
        gpus[name] = make_gpu(node=nodes[host], index=index, at=start - timedelta(days=1))
        minute_samples(gpus[name], start, minutes, util=util)
    for name, state in (("b", "degraded"), ("c", "failed")):
        GpuHealthInterval.objects.create(gpu=gpus[name], state=state, reason="xid 79",
                                         valid_from=now - timedelta(minutes=30))
    team = TeamFactory()
    for name in ("a", "e"):
        reserve(team, gpus[name], start, now + timedelta(hours=2))
    return gpus


def stat(body: str, name: str) -> str:
    match = re.search(rf'data-stat="{name}"><div class="label">(?:(?!</div>).)*</div>'
                      rf'<div class="value">((?:(?!</div>).)*)</div>', body)
    assert match, name
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_fleet_summary_counts_the_fleet_now(client, roles):
    gpus = small_fleet()
    client.force_login(roles.member)
    body = client.get(reverse("fleet")).content.decode()
    assert stat(body, "gpus") == "5"
    assert stat(body, "failed") == "1"
    assert stat(body, "degraded") == "1"
    assert stat(body, "nodes") == "2 / 3" and "1 silent" in body
    # (80+20+10)/3: the silent node's GPU and the failed one are left out
    assert stat(body, "util") == "36.7%"
    gpu_row = body[body.index(f'/fleet/gpus/{gpus["c"].uuid}/'):]
    assert gpu_row.split("</tr>")[0].count('badge failed') == 2  # health and utilization
    assert stat(body, "reserved") == "2"
    assert "Only problems (2)" in body


def test_fleet_problems_filter_keeps_silent_nodes_and_unhealthy_gpus(client, roles):
    small_fleet()
    client.force_login(roles.member)
    every = client.get(reverse("fleet")).content.decode()
    assert all(f'data-node="{h}"' in every for h in ("n1", "n2", "n3"))
    only = client.get(reverse("fleet") + "?problems=1").content.decode()
    assert 'data-node="n1"' in only and 'data-node="n2"' in only
    assert 'data-node="n3"' not in only
    assert stat(only, "gpus") == "5"  # the summary stays the whole fleet's


def test_fleet_problems_filter_with_nothing_wrong(client, roles):
    make_gpu(node=NodeFactory(hostname="fine", last_seen_at=timezone.now()))
    client.force_login(roles.member)
    body = client.get(reverse("fleet") + "?problems=1").content.decode()
    assert 'data-node="fine"' not in body and "No problems" in body
    assert stat(body, "util") == "no data"


def busy_hours_back(roles):
    """One GPU busy (100 %) for two hours yesterday-ish (within 24 h) and two hours three days
    ago (within 7 days)."""
    now = timezone.now()
    floor = hour_floor(now)
    gpu = make_gpu(node=NodeFactory(last_seen_at=now), at=floor - timedelta(days=9))
    minute_samples(gpu, floor - timedelta(hours=3), 120, util=100)
    minute_samples(gpu, floor - timedelta(days=3), 120, util=100)
    dirty_hours_process()
    return floor


@pytest.mark.parametrize("last, label, hours, busy", [("24h", "Last 24 h", 24, "2.00"),
                                                      ("7d", "Last 7 days", 168, "4.00")])
@pytest.mark.calendar
def test_utilization_last_hours(client, roles, last, label, hours, busy, clock):
    floor = busy_hours_back(roles)
    client.force_login(roles.admin)
    response = client.get(reverse("fleet_utilization") + f"?last={last}")
    assert response.status_code == 200
    body = response.content.decode()
    start = (floor - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M")
    assert f"{label}: {start} – " in body
    assert f"busy {busy} h of" in body


@pytest.mark.parametrize("last", [pytest.param("", marks=pytest.mark.calendar), "30d", "24H",
                                  "<script>"])
def test_utilization_unknown_last_falls_back_to_the_month(client, roles, last, clock):
    busy_hours_back(roles)
    client.force_login(roles.admin)
    response = client.get(reverse("fleet_utilization"), {"last": last})
    assert response.status_code == 200
    body = response.content.decode()
    now = timezone.now()
    assert f"{now:%B %Y} (a UTC month): {now:%Y-%m}-01 00:00 – " in body
    assert "Last 24 h:" not in body
