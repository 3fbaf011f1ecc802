"""Reliability on a GPU's page and on a node's page: the unit's figures beside its
class's, the lemon flag with its evidence, the latest incidents (application XIDs never
among them) and the drains; a real browser shows both (screenshots in test-artifacts/)."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drains import drains_apply
from tests.factories import AdminFactory, ClusterFactory, GpuClassFactory, NodeFactory, make_gpu
from tests.helpers import browser_login, screenshot

DAY = timedelta(days=1)


def _fleet(now):
    """Two nodes of eight H100s each; GPU 0 of node a fails five times (a lemon), node b's
    GPU 3 once; application XIDs on node b never count."""
    cluster = ClusterFactory(slug="lab", name="Lab")
    gpu_class = GpuClassFactory(name="H100-80GB")
    nodes = [NodeFactory(cluster=cluster, hostname=f"node-{x}") for x in "ab"]
    gpus = [[make_gpu(node=node, gpu_class=gpu_class, index=i, at=now - 200 * DAY)
             for i in range(8)] for node in nodes]

    def event(gpu, at, xid):
        GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=at,
                                type="xid", xid=xid, received_at=at)

    for days in (80, 60, 40, 20):
        event(gpus[0][0], now - days * DAY, 79)
    event(gpus[1][3], now - 30 * DAY, 48)
    event(gpus[1][3], now - 29 * DAY, 13)
    event(gpus[0][0], now - timedelta(minutes=5), 64)
    drains_apply(since=now - DAY, now=now)
    return gpus


@pytest.mark.django_db
def test_the_gpu_and_node_pages_show_reliability(client):
    now = timezone.now().replace(microsecond=0)
    gpus = _fleet(now)
    client.force_login(AdminFactory())
    page = client.get(f"/fleet/gpus/{gpus[0][0].uuid}/").content.decode()
    assert 'data-section="reliability"' in page and 'data-lemon="gpu"' in page
    assert "xid 79 x4" in page and "xid 64" in page and "drained now" in page
    assert f"/fleet/nodes/{gpus[0][0].node_id}/" in page
    quiet = client.get(f"/fleet/gpus/{gpus[1][3].uuid}/").content.decode()
    assert 'data-lemon="none"' in quiet and "xid 48" in quiet and "xid 13" not in quiet
    node = client.get(f"/fleet/nodes/{gpus[0][0].node_id}/").content.decode()
    assert "Node node-a" in node and 'data-lemon="node"' in node
    assert node.count('href="/fleet/gpus/') >= 8 and "Never drained" not in node
    assert client.get("/fleet/nodes/999999/").status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_browser_shows_the_reliability_sections(browser_page):
    now = timezone.now().replace(microsecond=0)
    gpus = _fleet(now)
    admin = AdminFactory(username="admin")
    admin.set_password("password")
    admin.save()
    page = browser_page
    browser_login(page, "admin")
    page.goto(f"/fleet/gpus/{gpus[0][0].uuid}/")
    section = page.locator("#reliability")
    assert "Lemon: flagged" in section.inner_text()
    assert "after running jobs" not in section.inner_text()  # xid 64 drains at once
    screenshot(page, "reliability-gpu-page")
    page.click(f"a[href='/fleet/nodes/{gpus[0][0].node_id}/']")
    page.wait_for_url("**/fleet/nodes/*/")
    assert page.locator("#node-gpus tbody tr").count() == 8
    assert "replace" in page.locator("#reliability-unit-drains").inner_text()
    screenshot(page, "reliability-node-page")
