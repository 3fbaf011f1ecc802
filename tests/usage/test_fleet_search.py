"""The fleet page at scale: search, filters, nodes paginated, and the same number of
queries whatever the fleet's size."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.fleet_index import NODES_PER_PAGE
from tests.factories import ClusterFactory, GpuClassFactory, NodeFactory, TeamFactory, make_gpu
from tests.usage.factories import minute_samples, reserve

pytestmark = pytest.mark.django_db


def nodes_shown(body: str) -> list[str]:
    return re.findall(r'data-node="([^"]+)"', body)


def gpus_shown(body: str) -> list[str]:
    return re.findall(r'data-gpu="([^"]+)"', body)


@pytest.fixture
def fleet(roles):
    """Two clusters; a-01 (2 H100: one reserved by Vision, one failed), a-02 (1 L4, reserved
    by Physics), b-01 in the other cluster (1 H100 degraded, unreserved)."""
    now = timezone.now().replace(microsecond=0)
    start = hour_floor(now) - timedelta(hours=1)
    east, west = ClusterFactory(name="East"), ClusterFactory(name="West")
    h100, l4 = GpuClassFactory(name="H100-80GB"), GpuClassFactory(name="L4")
    nodes = {"a-01": NodeFactory(hostname="a-01", cluster=east, last_seen_at=now),
             "a-02": NodeFactory(hostname="a-02", cluster=east, last_seen_at=now),
             "b-01": NodeFactory(hostname="b-01", cluster=west, last_seen_at=now)}
    at = start - timedelta(days=1)
    gpus = {"v": make_gpu(node=nodes["a-01"], gpu_class=h100, index=0, at=at),
            "f": make_gpu(node=nodes["a-01"], gpu_class=h100, index=1, at=at),
            "p": make_gpu(node=nodes["a-02"], gpu_class=l4, index=0, at=at),
            "d": make_gpu(node=nodes["b-01"], gpu_class=h100, index=0, at=at)}
    for gpu in gpus.values():
        minute_samples(gpu, now - timedelta(minutes=3), 3, util=30)
    reserve(roles.team, gpus["v"], start, now + timedelta(hours=2))
    reserve(TeamFactory(name="Physics", slug="physics"), gpus["p"], start,
            now + timedelta(hours=2))
    for name, state in (("f", "failed"), ("d", "degraded")):
        GpuHealthInterval.objects.create(gpu=gpus[name], state=state, reason="xid 79",
                                         valid_from=now - timedelta(minutes=30))
    return {"gpus": gpus, "east": east, "west": west, "h100": h100, "l4": l4}


def get(client, **params):
    response = client.get(reverse("fleet"), params)
    assert response.status_code == 200
    return response.content.decode()


def test_search_by_hostname_uuid_and_team(client, roles, fleet):
    client.force_login(roles.admin)
    gpus = fleet["gpus"]
    body = get(client, q="A-0")
    assert nodes_shown(body) == ["a-01", "a-02"] and len(gpus_shown(body)) == 3
    part = gpus["d"].uuid[-12:-4].upper()  # a few keystrokes of the UUID, any case
    body = get(client, q=part)
    assert nodes_shown(body) == ["b-01"] and gpus_shown(body) == [gpus["d"].uuid]
    assert " open>" in body or " open\n" in body  # a search opens the nodes it found
    body = get(client, q="physics")
    assert gpus_shown(body) == [gpus["p"].uuid]
    assert "No node or GPU matches." in get(client, q="nothing-like-this")
    assert 'data-stat="gpus"><div class="label">GPUs in service</div><div class="value">4<' \
        in get(client, q="physics")  # the summary stays the whole fleet's


def test_search_by_team_only_finds_teams_the_viewer_sees(client, roles, fleet):
    client.force_login(roles.other_lead)
    assert gpus_shown(get(client, q=roles.team.name)) == []
    client.force_login(roles.member)
    assert gpus_shown(get(client, q=roles.team.name)) == [fleet["gpus"]["v"].uuid]


def test_filters(client, roles, fleet):
    client.force_login(roles.admin)
    gpus = fleet["gpus"]
    assert gpus_shown(get(client, gpu_class=fleet["l4"].id)) == [gpus["p"].uuid]
    assert nodes_shown(get(client, cluster=fleet["west"].id)) == ["b-01"]
    assert gpus_shown(get(client, health="failed")) == [gpus["f"].uuid]
    assert gpus_shown(get(client, health="healthy")) == [gpus["v"].uuid, gpus["p"].uuid]
    assert gpus_shown(get(client, reserved="yes")) == [gpus["v"].uuid, gpus["p"].uuid]
    assert gpus_shown(get(client, reserved="no")) == [gpus["f"].uuid, gpus["d"].uuid]
    assert gpus_shown(get(client, team=roles.team.id)) == [gpus["v"].uuid]
    assert gpus_shown(get(client, gpu_class=fleet["h100"].id, reserved="no",
                          cluster=fleet["east"].id)) == [gpus["f"].uuid]
    # problems and a filter together; the problem link keeps the filter
    body = get(client, cluster=fleet["east"].id, problems="1")
    assert nodes_shown(body) == ["a-01"]
    body = get(client, cluster=fleet["east"].id)
    assert f'href="?cluster={fleet["east"].id}&amp;problems=1"' in body


def test_bad_filter_values_are_ignored_with_a_message(client, roles, fleet):
    client.force_login(roles.other_lead)
    body = get(client, team=roles.team.id, gpu_class="x", health="melted", reserved="maybe")
    assert 'id="fleet-filter-errors"' in body
    assert len(gpus_shown(body)) == 4  # nothing filtered by an invalid value


def test_nodes_are_collapsed_and_paginated(client, roles):
    cluster = ClusterFactory()
    for n in range(NODES_PER_PAGE + 3):
        make_gpu(node=NodeFactory(hostname=f"n-{n:03d}", cluster=cluster))
    client.force_login(roles.member)
    first = get(client)
    assert len(nodes_shown(first)) == NODES_PER_PAGE and "page 1 of 2" in first
    assert "<details" in first and " open" not in first.split('id="fleet-matching"')[1]
    second = get(client, page="2")
    assert nodes_shown(second) == [f"n-{n:03d}" for n in range(NODES_PER_PAGE, NODES_PER_PAGE + 3)]
    assert get(client, page="99").count("data-node=") == 3  # past the end: the last page


def small_or_large(roles, nodes: int, gpus_per_node: int) -> None:
    now = timezone.now().replace(microsecond=0)
    team = TeamFactory()
    for n in range(nodes):
        node = NodeFactory(last_seen_at=now)
        for i in range(gpus_per_node):
            gpu = make_gpu(node=node, index=i)
            minute_samples(gpu, now - timedelta(minutes=2), 2, util=50)
            if i == 0:
                reserve(team if n % 2 else roles.team, gpu, now - timedelta(hours=1),
                        now + timedelta(hours=1))
            if i == 1:
                GpuHealthInterval.objects.create(gpu=gpu, state="failed", reason="xid 79",
                                                 valid_from=now - timedelta(minutes=5))


@pytest.mark.parametrize("params", [{}, {"q": "gpu"}, {"reserved": "yes", "health": "healthy"}])
def test_query_count_is_the_same_for_a_small_and_a_large_fleet(client, roles, params):
    client.force_login(roles.admin)
    small_or_large(roles, 2, 2)
    with CaptureQueriesContext(connection) as small:
        get(client, **params)
    small_or_large(roles, NODES_PER_PAGE + 5, 4)  # more than a page of nodes
    with CaptureQueriesContext(connection) as large:
        body = get(client, **params)
    # 21 (the filters' choices 3, the summary 4: no recent snapshot, counted now, the
    # page's nodes 5, fleet_now 5...), reclaim's fleet figures (2, 3 with no amount: its
    # currency), telemetry's (2)
    assert len(large) == len(small) <= 26
    assert len(nodes_shown(body)) == NODES_PER_PAGE


def test_index_takes_the_busiest_mig_device_and_leaves_failed_gpus_out(roles):
    import uuid

    from gpuquota.inventory.models import Gpu
    from gpuquota.usage.fleet import fleet_now
    from gpuquota.usage.fleet_summary import fleet_summary

    now = timezone.now().replace(microsecond=0)
    node = NodeFactory(last_seen_at=now)
    gpu, failed = make_gpu(node=node, index=0), make_gpu(node=node, index=1)
    mig = Gpu.objects.create(uuid=f"MIG-{uuid.uuid4()}", parent=gpu, node=node,
                             gpu_class=gpu.gpu_class, commissioned_at=gpu.commissioned_at)
    minute_samples(gpu, now - timedelta(minutes=3), 3, util=10)
    minute_samples(mig, now - timedelta(minutes=3), 3, util=70)
    minute_samples(failed, now - timedelta(minutes=3), 3, util=90)
    GpuHealthInterval.objects.create(gpu=failed, state="failed", reason="gpu_lost",
                                     valid_from=now - timedelta(minutes=1))
    [row] = fleet_now(now=now, node_ids=[node.id], gpu_ids={gpu.id, failed.id})
    assert [(g.gpu.id, g.util) for g in row.gpus] == [(gpu.id, 70), (failed.id, None)]
    summary = fleet_summary(now=now)
    assert (summary.gpus, summary.failed, summary.util_mean) == (2, 1, 70)


def test_the_summary_is_read_from_the_last_minute_count_else_counted_now(client, roles, clock):
    from gpuquota.usage.fleet_summary import FRESH_S, fleet_summary_now
    from gpuquota.usage.tasks import fleet_summary_task

    now = clock.now
    small_or_large(roles, 2, 2)
    fleet_summary_task.apply()
    make_gpu(node=NodeFactory(last_seen_at=now))  # after the count: shown a minute later
    counted = fleet_summary_now(now=now)
    assert (counted.gpus, counted.failed, counted.reserved) == (4, 2, 2)
    assert counted.as_of is not None and counted.util_mean == 50
    client.force_login(roles.admin)
    assert 'id="fleet-summary-as-of"' in get(client)
    live = fleet_summary_now(now=now + timedelta(seconds=FRESH_S + 1))
    assert (live.gpus, live.as_of) == (5, None)
