"""The fleet and GPU pages read as a person would, in a real browser: a collapsed node row
says how busy the node is, times are to the minute, a GPU with hours of history is drawn
over a day with the hours it has no data for shaded, the use column says what the use was,
and a recovery is offered only for a GPU that is failed or degraded now."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import NodeFactory, RoleMatrix, make_gpu
from tests.helpers import browser_login, screenshot
from tests.usage.factories import minute_samples, reserve

pytestmark = [pytest.mark.browser]
NOW = datetime(2027, 4, 14, 10, 20, 37, tzinfo=UTC)


def test_fleet_and_gpu_pages_as_a_person_reads_them(transactional_db, browser_page):
    with time_machine.travel(NOW, tick=True):
        roles = RoleMatrix.create()
        start = NOW.replace(minute=0, second=0) - timedelta(hours=8)
        node = NodeFactory(hostname="gpu-node-01", last_seen_at=NOW)
        busy, recovered, failed = (make_gpu(node=node, index=i, at=start - timedelta(days=3))
                                   for i in range(3))
        minute_samples(busy, start, 8 * 60 + 19, util=60)  # up to the last minute
        minute_samples(recovered, start, 8 * 60 + 19, util=20)
        reservation = reserve(roles.team, busy, start, NOW + timedelta(hours=4)).reservation
        GpuHealthInterval.objects.create(gpu=recovered, state="failed", reason="xid 79",
                                         valid_from=start, valid_until=start + timedelta(hours=1))
        GpuHealthInterval.objects.create(gpu=failed, state="failed", reason="xid 79",
                                         valid_from=NOW - timedelta(hours=1))
        dirty_hours_process()
        page = browser_page
        browser_login(page, "admin")

        page.goto("/fleet/")
        row = page.locator("details.node summary").first
        assert "40.0%" in row.inner_text()  # (60 + 20) / 2; the failed GPU is not counted
        assert "last seen 2027-04-14 10:20" in row.inner_text()
        assert not re.search(r"\d\d:\d\d:\d\d", row.inner_text())  # no seconds
        screenshot(page, "usage-fleet-collapsed-node-util")

        page.goto(f"/fleet/gpus/{busy.uuid}/")
        assert "last 1 day" in page.inner_text("h2 >> nth=0")  # 8 h of history: not 2 days
        chart = page.locator("svg.chart").first
        assert chart.locator("rect.nodata").count() == 1  # the 16 hours before the data
        assert "shaded: no data" in chart.text_content()
        table = page.locator("table", has_text="Used as")
        assert f"Reservation #{reservation.pk}" in table.inner_text()
        assert page.locator("text=Record a recovery").count() == 0
        screenshot(page, "usage-gpu-detail-short-history")

        page.goto(f"/fleet/gpus/{recovered.uuid}/")  # failed once, healthy now
        assert page.locator("text=Record a recovery").count() == 0
        assert not re.search(r"\d\d:\d\d:\d\d", page.inner_text("table >> nth=1"))
        page.goto(f"/fleet/gpus/{failed.uuid}/")
        assert page.locator("text=Record a recovery").count() == 1
