"""Fleet utilization beside its coverage: time the agents did not report counts as not busy
in fleet utilization, so the page says how much of the in-service time was reported (and
how busy that was), not a bare 4.8 % beside the fleet page's "now 43 %"."""

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
import time_machine
from django.test import Client

from gpuquota.core.timeutil import Period
from gpuquota.usage.selectors import fleet_utilization
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, make_gpu
from tests.usage.factories import minute_samples

pytestmark = pytest.mark.django_db
NOW = datetime(2027, 5, 11, 0, 0, tzinfo=UTC)


@time_machine.travel(NOW, tick=False)
def test_fleet_utilization_comes_with_its_coverage():
    gpu = make_gpu(at=datetime(2027, 4, 1, tzinfo=UTC))
    minute_samples(gpu, NOW - timedelta(hours=24), 24 * 60 // 2, util=80)  # 12 of 240 h
    dirty_hours_process()
    fleet = fleet_utilization(period=Period(datetime(2027, 5, 1, tzinfo=UTC), NOW))
    assert fleet.coverage == Fraction(12, 240)
    assert fleet.reported_utilization == 1
    assert fleet.utilization == fleet.coverage  # all reported time was busy
    client = Client()
    client.force_login(AdminFactory())
    card = client.get("/fleet/utilization/?month=2027-05").content.decode().split(
        'id="fleet-coverage"')[1].split("</div></div>")[0]
    assert "5.0%" in card and "12.00 h reported, busy 100.0% of them" in card
