"""The fleet pages in a real browser, with screenshots in test-artifacts/."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import NodeFactory, RoleMatrix, make_gpu
from tests.helpers import browser_login, screenshot
from tests.usage.factories import add_processes, minute_samples, reserve, team_with_user

pytestmark = [pytest.mark.browser]


def demo_fleet(roles: RoleMatrix):
    now = timezone.now().replace(microsecond=0)
    start = hour_floor(now) - timedelta(hours=30)
    node = NodeFactory(hostname="gpu-node-01", last_seen_at=now, agent_version="1.0.0",
                       driver_version="580.65.06")
    silent = NodeFactory(hostname="gpu-node-02", cluster=node.cluster,
                         last_seen_at=now - timedelta(hours=2))
    gpus = [make_gpu(node=node, index=i, at=start - timedelta(days=1)) for i in range(3)]
    gpus.append(make_gpu(node=silent, index=0, at=start - timedelta(days=1)))
    _team, _user = team_with_user("physics", "alice", node.cluster)
    minutes = int((now - start).total_seconds() // 60)
    for i, gpu in enumerate(gpus[:3]):
        minute_samples(gpu, start, minutes, util=[85, 12, 0][i],
                       memory_used_bytes_max=(40 + 10 * i) * 2**30,
                       memory_used_bytes_avg=(35 + 10 * i) * 2**30)
    minute_samples(gpus[3], start, minutes - 150, util=60)
    add_processes(gpus[1], start, minutes, user="alice")
    reserve(roles.team, gpus[0], start + timedelta(hours=3), now + timedelta(hours=10))
    GpuHealthInterval.objects.create(gpu=gpus[2], state="failed", reason="xid 79",
                                     valid_from=now - timedelta(hours=5))
    dirty_hours_process()
    return gpus


def test_fleet_pages_screenshots(transactional_db, browser_page):
    roles = RoleMatrix.create()
    gpus = demo_fleet(roles)
    page = browser_page
    browser_login(page, "admin")
    page.goto("/fleet/")
    assert page.locator("text=agent silent").count() == 1
    assert page.locator(".badge.failed").count() == 2  # its health, and in place of a reading
    screenshot(page, "usage-fleet-admin")
    page.goto(f"/fleet/gpus/{gpus[0].uuid}/")
    assert page.locator("svg.chart").count() == 2
    screenshot(page, "usage-gpu-detail-admin")
    page.goto(f"/fleet/gpus/{gpus[2].uuid}/")
    assert page.locator("text=Mark recovered").count() == 1
    page.goto("/fleet/utilization/")
    assert page.locator("#class-utilization").count() == 1
    screenshot(page, "usage-utilization-admin")
    page.context.clear_cookies()
    browser_login(page, "lead")
    page.goto("/teams/vision/")
    assert page.locator("#reservation-utilization").count() == 1
    screenshot(page, "usage-team-page-lead")


def test_fleet_page_as_a_member_of_another_team(transactional_db, browser_page):
    roles = RoleMatrix.create()
    demo_fleet(roles)
    browser_login(browser_page, "other_lead")
    browser_page.goto("/fleet/")
    assert browser_page.locator("text=another team").count() == 1
    assert browser_page.locator("text=Vision").count() == 0
    screenshot(browser_page, "usage-fleet-other-team")


@pytest.mark.django_db(transaction=True)
def test_lead_picks_a_past_month_on_the_team_page_and_reads_its_chart(live_server, browser_page):
    from datetime import UTC, datetime

    from gpuquota.reservations.models import Reservation
    from tests.usage.factories import T0

    roles = RoleMatrix.create()
    roles.lead.set_password("password")
    roles.lead.save()
    gpus = [make_gpu(node=NodeFactory(hostname="h100-01"), index=i,
                     at=datetime(2026, 9, 1, tzinfo=UTC)) for i in range(2)]
    for day in (3, 10, 20):
        start = datetime(2026, 10, day, 8, tzinfo=UTC)
        for gpu in gpus:
            minute_samples(gpu, start, 180, util=70)
            reserve(roles.team, gpu, start, start + timedelta(hours=6),
                    status=Reservation.Status.ENDED)
    minute_samples(gpus[0], T0, 60, util=90)
    dirty_hours_process()
    page = browser_page
    browser_login(page, roles.lead.username)
    page.goto("/teams/vision/")
    page.fill(".month-picker input[name=month]", "2026-10")
    page.click(".month-picker button[type=submit]")
    page.wait_for_url("**month=2026-10**")
    heading = page.inner_text("#figures h2")
    assert "October 2026" in heading and "to date" not in heading
    chart = page.locator("#daily-chart svg")
    assert chart.locator("rect.reserved").count() == 31
    busy = chart.locator('rect.busy[data-day="2026-10-10"]')
    assert "reserved 12.00 GPU-h, busy 6.00 GPU-h" in busy.locator("title").text_content()
    assert page.locator("#reservation-utilization tbody tr").count() == 6
    assert "Oct 2026" in page.inner_text("#trend")
    page.locator("#daily-chart").scroll_into_view_if_needed()
    screenshot(page, "team-page-past-month-chart")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/teams/vision/?month=2026-10")
    screenshot(page, "team-page-390px")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.goto("/reservations/new/")
    screenshot(page, "reservation-form-390px")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_admin_finds_a_gpu_among_many_nodes_with_search_and_filters(transactional_db,
                                                                      browser_page):
    from tests.factories import ClusterFactory, GpuClassFactory

    roles = RoleMatrix.create()
    now = timezone.now().replace(microsecond=0)
    east, west = ClusterFactory(name="East"), ClusterFactory(name="West")
    l4 = GpuClassFactory(name="L4")
    wanted = None
    for n in range(40):
        node = NodeFactory(hostname=f"{'east' if n % 2 else 'west'}-{n:03d}",
                           cluster=east if n % 2 else west, last_seen_at=now)
        for i in range(4):
            gpu = make_gpu(node=node, index=i, gpu_class=l4 if i == 3 else None)
            if n == 17 and i == 3:
                wanted = gpu
                reserve(roles.team, gpu, now - timedelta(hours=1), now + timedelta(hours=3))
    page = browser_page
    browser_login(page, "admin")
    page.goto("/fleet/")
    assert page.locator("details.node").count() == 25
    assert page.locator("details.node[open]").count() == 0  # collapsed by default
    assert page.locator("tr[data-gpu]").first.is_visible() is False
    screenshot(page, "usage-fleet-collapsed")
    page.fill("#id_q", wanted.uuid[4:12])
    page.click("#fleet-search button[type=submit]")
    page.wait_for_url("**q=**")
    assert page.locator("details.node").count() == 1
    assert page.locator(f'tr[data-gpu="{wanted.uuid}"]').is_visible()
    assert "Vision" in page.inner_text(f'tr[data-gpu="{wanted.uuid}"]')
    page.fill("#id_q", "")
    page.select_option("#id_cluster", label="East")
    page.select_option("#id_gpu_class", label="L4")
    page.select_option("#id_reserved", value="yes")
    page.click("#fleet-search button[type=submit]")
    page.wait_for_url("**reserved=yes**")
    assert page.locator("details.node").count() == 1
    assert page.locator("tr[data-gpu]").count() == 1
    page.click("details.node summary")
    assert page.locator(f'tr[data-gpu="{wanted.uuid}"]').is_visible()
    assert "1 node, 1 matching GPU" in page.inner_text("#fleet-matching")
    screenshot(page, "usage-fleet-filtered")


def test_fleet_and_utilization_pages_say_how_fresh_their_figures_are(transactional_db,
                                                                     browser_page):
    roles = RoleMatrix.create()
    gpus = demo_fleet(roles)
    page = browser_page
    browser_login(page, "admin")
    page.goto("/fleet/")
    freshness = page.locator("#usage-freshness")
    now = timezone.now().replace(microsecond=0)
    assert f"Figures as of {now:%Y-%m-%d} " in freshness.inner_text()
    minute_samples(gpus[0], now - timedelta(minutes=1), 1, util=70)  # not swept yet
    page.reload()
    text = freshness.inner_text()
    # waiting for the next recompute within the freshness bound is normal: no alarm
    assert "Figures as of" in text and "waiting" not in text and "behind" not in text
    assert freshness.get_attribute("data-late") == "0"
    # the sweep has not run for longer than the bound: the page says so, with what waits
    DirtyGpuHour.objects.update(marked_at=now - timedelta(minutes=12))
    page.reload()
    text = freshness.inner_text()
    assert "12 min behind, more than the 5 min they should lag at most" in text
    assert "1 GPU-hour waiting for their recompute" in text
    assert freshness.get_attribute("data-late") == "1"
    screenshot(page, "usage-fleet-freshness")
    page.goto("/fleet/utilization/?last=24h")
    assert "1 GPU-hour waiting" in page.locator("#usage-freshness").inner_text()
    screenshot(page, "usage-utilization-freshness")
    page.click("#usage-freshness a.term")
    assert page.locator("#as-of").is_visible()
