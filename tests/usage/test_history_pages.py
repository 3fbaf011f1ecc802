"""The team page for any past month (per-day chart, trend, paginated past reservations)
and the utilization page's per-day charts; query counts the same at two data sizes."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gpuquota.reservations.models import Reservation
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import GpuClassFactory, NodeFactory, make_gpu
from tests.usage.factories import T0, minute_samples, reserve

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def october(roles, gpus: int = 1):
    """`gpus` GPUs reserved by vision on 31 Oct 2026 22:00-24:00, busy the first hour."""
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory()
    for index in range(gpus):
        gpu = make_gpu(node=node, gpu_class=gpu_class, index=index)
        minute_samples(gpu, T0, 60, util=90)
        reserve(roles.team, gpu, T0, T0 + 2 * H, status=Reservation.Status.ENDED)
    dirty_hours_process()


def test_team_page_shows_a_past_month_with_its_chart_and_trend(client, roles):
    october(roles)
    client.force_login(roles.member)
    body = client.get(reverse("team_detail", args=["vision"]), {"month": "2026-10"}
                      ).content.decode()
    assert "October 2026" in body and 'id="reservation-utilization"' in body
    at = body.index('id="daily-chart"')
    chart = body[at:body.index("</svg>", at)]
    assert chart.count('class="reserved"') == 31  # one bar per day of October
    assert 'data-day="2026-10-31"' in chart
    assert "Sat 2026-10-31: reserved 2.00 GPU-h, busy 1.00 GPU-h" in chart
    trend = body[body.index('id="trend"'):]
    assert "Oct 2026" in trend and "May 2026" in trend and "Nov 2026" not in trend
    assert 'href="?month=2026-09#figures"' in body  # previous month
    # this month has nothing of it: the chart says so
    now_body = client.get(reverse("team_detail", args=["vision"])).content.decode()
    assert "Nothing reserved in this period" in now_body


@pytest.mark.parametrize("month, message", [("2026-13", "Pick a month as YYYY-MM"),
                                            ("nonsense", "Pick a month as YYYY-MM"),
                                            pytest.param("2099-01", "has not begun",
                                                         marks=pytest.mark.calendar)])
def test_team_page_refuses_a_bad_month_with_a_message(client, roles, month, message, clock):
    client.force_login(roles.lead)
    response = client.get(reverse("team_detail", args=["vision"]), {"month": month})
    assert response.status_code == 200
    body = response.content.decode()
    assert message in body and f"{timezone.now():%B %Y}" in body


def test_past_reservations_are_paginated(client, roles):
    gpu = make_gpu()
    start = datetime(2026, 6, 1, tzinfo=UTC)
    for day in range(25):
        reserve(roles.team, gpu, start + timedelta(days=day), start + timedelta(days=day, hours=1),
                status=Reservation.Status.ENDED)
    client.force_login(roles.member)
    first = client.get(reverse("team_detail", args=["vision"])).content.decode()
    past = first[first.index('id="past"'):]
    assert past.count('id="reservation-') == 20
    assert "page 1 of 2 · 25 past reservations" in past and "past=2#past" in past
    second = client.get(reverse("team_detail", args=["vision"]), {"past": 2}).content.decode()
    assert second[second.index('id="past"'):].count('id="reservation-') == 5
    assert client.get(reverse("team_detail", args=["vision"]), {"past": "x"}).status_code == 200


def test_utilization_page_has_the_per_day_chart_for_the_fleet_and_each_class(client, roles):
    october(roles)
    client.force_login(roles.member)
    body = client.get(reverse("fleet_utilization"), {"month": "2026-10"}).content.decode()
    assert 'id="fleet-daily-chart"' in body and 'data-class="H100-80GB"' in body
    # two bars (reserved, busy) per chart: the fleet and the class
    assert body.count("reserved 2.00 GPU-h, busy 1.00 GPU-h") == 4
    assert "mean GPU utilization ≥ 5%" in body


def _queries(client, url, params) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, params).status_code == 200
    return len(captured)


@pytest.mark.parametrize("url, params", [
    ("/teams/vision/", {"month": "2026-10"}),
    ("/teams/vision/", {}),
    ("/fleet/utilization/", {"month": "2026-10"}),
    ("/fleet/utilization/", {"last": "24h"}),
])
def test_history_pages_run_the_same_queries_at_two_sizes(client, roles, url, params):
    october(roles, gpus=1)
    client.force_login(roles.lead)
    small = _queries(client, url, params)
    october_more = make_gpu(node=NodeFactory(), gpu_class=GpuClassFactory(name="H100-80GB"))
    for index in range(6):
        gpu = make_gpu(node=october_more.node, gpu_class=october_more.gpu_class, index=index)
        minute_samples(gpu, T0, 90, util=70)
        reserve(roles.team, gpu, T0 + index * 60 * timedelta(seconds=1), T0 + 2 * H,
                status=Reservation.Status.ENDED)
    dirty_hours_process()
    assert _queries(client, url, params) == small
