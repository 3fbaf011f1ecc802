"""Reserved versus busy GPU-seconds per UTC day: exact at day, month and arbitrary edges,
equal in sum to the period figures, in a bounded number of queries."""

from datetime import UTC, date, datetime, timedelta
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.core.timeutil import Period
from gpuquota.inventory.services import gpu_reclassify
from gpuquota.usage.daily import (
    DayUsage,
    daily_usage,
    day_windows,
    seconds_by_day,
    seconds_by_window,
)
from gpuquota.usage.seconds import CLASS_IN_FORCE, reserved_by_class_qs, reserved_qs
from gpuquota.usage.selectors import fleet_utilization, team_utilization
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, GpuClassFactory, NodeFactory, TeamFactory, make_gpu
from tests.usage.factories import T0, class_figures, minute_samples, reserve

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)
OCT, NOV = Period.month(2026, 10), Period.month(2026, 11)


def _by_day(rows: list[DayUsage]) -> dict[date, tuple[int, Fraction]]:
    return {r.day: (r.reserved_s, r.busy_s) for r in rows}


def test_a_reservation_across_midnight_and_a_month_edge_splits_exactly():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0 + H, 120, util=60)  # 23:00 Oct 31 → 01:00 Nov 1, busy
    start = datetime(2026, 10, 31, 23, 30, 20, tzinfo=UTC)
    end = datetime(2026, 11, 1, 0, 40, 10, tzinfo=UTC)
    reserve(team, gpu, start, end)
    dirty_hours_process()
    period = Period(datetime(2026, 10, 30, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC))
    days = daily_usage(period=period, team=team)
    assert [d.day for d in days] == [date(2026, 10, 30), date(2026, 10, 31),
                                     date(2026, 11, 1), date(2026, 11, 2)]
    assert _by_day(days) == {date(2026, 10, 30): (0, 0), date(2026, 10, 31): (1780, 1780),
                             date(2026, 11, 1): (2410, 2410), date(2026, 11, 2): (0, 0)}
    assert days[2].reserved_hours == days[2].busy_hours  # 0.67 h each
    assert days[0].utilization is None and days[1].utilization == 1
    assert sum(d.reserved_s for d in daily_usage(period=NOV, team=team)) == \
        team_utilization(team=team, period=NOV).reserved_s


def test_busy_counts_only_inside_reserved_assignments_and_partial_hours_are_exact():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 180, util=30)  # busy 22:00 Oct 31 → 01:00 Nov 1
    reserve(team, gpu, T0 + 50 * M + timedelta(seconds=7), T0 + 2 * H + 20 * M)
    dirty_hours_process()
    # arbitrary edges: the first and last partial hours come from the samples
    period = Period(T0 + 55 * M, T0 + 2 * H + 17 * M + timedelta(seconds=13))
    days = daily_usage(period=period)
    oct31 = int((datetime(2026, 11, 1, tzinfo=UTC) - (T0 + 55 * M)).total_seconds())
    nov1 = 17 * 60 + 13  # 00:00 → the period's end, inside the reservation and samples
    assert _by_day(days) == {date(2026, 10, 31): (oct31, oct31),
                             date(2026, 11, 1): (nov1, 17 * 60 + 13)}
    figures = fleet_utilization(period=period).reserved
    assert sum(d.reserved_s for d in days) == figures.reserved_s
    assert sum(d.busy_s for d in days) == figures.sums.busy_s


def test_other_teams_and_unreserved_busy_time_are_not_counted():
    gpu, other_gpu = make_gpu(), make_gpu()
    vision, speech = TeamFactory(slug="vision"), TeamFactory(slug="speech")
    minute_samples(gpu, T0, 120, util=90)
    minute_samples(other_gpu, T0, 120, util=90)
    reserve(vision, gpu, T0, T0 + 30 * M)
    reserve(speech, other_gpu, T0, T0 + H)
    dirty_hours_process()
    assert _by_day(daily_usage(period=OCT, team=vision))[date(2026, 10, 31)] == (1800, 1800)
    assert _by_day(daily_usage(period=OCT, team=speech))[date(2026, 10, 31)] == (3600, 3600)
    assert _by_day(daily_usage(period=OCT))[date(2026, 10, 31)] == (5400, 5400)


def test_approval_after_start_charges_from_approval():
    gpu = make_gpu()
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 60, util=90)
    reserve(team, gpu, T0, T0 + H, approved_at=T0 + 20 * M)
    dirty_hours_process()
    day = _by_day(daily_usage(period=OCT, team=team))[date(2026, 10, 31)]
    assert day[0] == 2400  # busy is measured inside the assignment, as team_utilization
    assert day[1] == team_utilization(team=team, period=OCT).sums.busy_s


def test_a_class_counts_the_seconds_while_the_gpu_was_of_that_class():
    old, new = GpuClassFactory(name="A100-40GB"), GpuClassFactory(name="A100-80GB")
    gpu = make_gpu(gpu_class=old)
    team = TeamFactory(slug="vision")
    minute_samples(gpu, T0, 120, util=70)
    reserve(team, gpu, T0, T0 + 2 * H)
    gpu_reclassify(gpu=gpu, gpu_class=new, at=T0 + H + 15 * M)
    dirty_hours_process()
    assert _by_day(daily_usage(period=OCT, gpu_class=old))[date(2026, 10, 31)] == (4500, 4500)
    nov = daily_usage(period=NOV, gpu_class=new)
    assert _by_day(nov)[date(2026, 11, 1)] == (0, 0)
    oct_new = _by_day(daily_usage(period=OCT, gpu_class=new, team=team))[date(2026, 10, 31)]
    assert oct_new == (2700, 2700)
    assert oct_new[0] == class_figures(new, OCT).reserved_s


def test_days_are_utc_days_clipped_to_the_period():
    period = Period(datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 6, tzinfo=UTC))
    assert day_windows(period) == [
        (date(2026, 3, 28), period.start, datetime(2026, 3, 29, tzinfo=UTC)),
        (date(2026, 3, 29), datetime(2026, 3, 29, tzinfo=UTC), datetime(2026, 3, 30, tzinfo=UTC)),
        (date(2026, 3, 30), datetime(2026, 3, 30, tzinfo=UTC), period.end),
    ]
    assert daily_usage(period=Period(period.start, period.start)) == []


def _fleet(size: int, team) -> None:
    gpu_class = GpuClassFactory(name=f"C{size}")
    node = NodeFactory()
    for index in range(size):
        gpu = make_gpu(node=node, gpu_class=gpu_class, index=index)
        minute_samples(gpu, T0 - 20 * M, 30, util=50)
        reserve(team, gpu, T0 - 24 * H + index * M, T0 + index * M)


def _queries(team) -> int:
    period = Period(datetime(2026, 10, 1, 0, 7, tzinfo=UTC), T0 + 5 * M)  # partial edges
    with CaptureQueriesContext(connection) as captured:
        daily_usage(period=period, team=team)
    return len(captured)


def test_query_count_does_not_grow_with_the_fleet():
    small, large = TeamFactory(slug="small"), TeamFactory(slug="large")
    _fleet(2, small)
    _fleet(12, large)
    dirty_hours_process()
    assert _queries(small) == _queries(large) <= 16


def _odd_reservations():
    """Reservations with edges on and off midnight, to the microsecond, one GPU
    reclassified while reserved, and the period's ends cutting some of them."""
    team = TeamFactory(slug="odd")
    old, new = GpuClassFactory(name="OLD"), GpuClassFactory(name="NEW")
    node = NodeFactory()
    gpus = [make_gpu(node=node, gpu_class=old, index=i) for i in range(4)]
    nov = datetime(2026, 11, 1, tzinfo=UTC)
    reserve(team, gpus[0], nov - 3 * H, nov + 40 * 24 * H)  # over the whole month
    reserve(team, gpus[1], nov + 24 * H, nov + 48 * H)  # a whole day, midnight to midnight
    reserve(team, gpus[2], nov + 5 * 24 * H + timedelta(seconds=7, microseconds=500_001),
            nov + 9 * 24 * H + 13 * H + timedelta(microseconds=999_999))
    reserve(team, gpus[3], nov + 29 * 24 * H + 22 * H + 30 * M, nov + 31 * 24 * H)
    gpu_reclassify(gpu=gpus[0], gpu_class=new, at=nov + 12 * 24 * H + 6 * H)


@pytest.mark.parametrize("period", [
    Period(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 30, 23, tzinfo=UTC)),
    Period(datetime(2026, 11, 24, 23, tzinfo=UTC), datetime(2026, 12, 1, 23, tzinfo=UTC)),
    NOV, Period(datetime(2026, 11, 2, 5, tzinfo=UTC), datetime(2026, 11, 2, 6, tzinfo=UTC)),
])
def test_seconds_by_day_are_the_clipped_seconds_of_each_day(period):
    _odd_reservations()
    windows = day_windows(period)
    assert seconds_by_day(reserved_qs(period), windows) == \
        seconds_by_window(reserved_qs(period), windows)
    by_class = seconds_by_day(reserved_by_class_qs(period), windows, CLASS_IN_FORCE)
    assert by_class == seconds_by_window(reserved_by_class_qs(period), windows, CLASS_IN_FORCE)
    assert len(by_class) == (2 if period.end > datetime(2026, 11, 13, tzinfo=UTC) else 1)
    assert seconds_by_day(reserved_qs(period, gpu__index=9), windows) == \
        {day: 0 for day, _start, _end in windows}


def _case_expressions(clock, client, now: datetime) -> tuple[int, int]:
    clock.move_to(now)
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/fleet/utilization/").status_code == 200
    return len(captured), sum(q["sql"].count("CASE") for q in captured)


def test_the_utilization_page_on_a_months_last_day_reads_as_on_its_second(clock, client):
    """A month's last day summed each assignment's seconds 31 times, one CASE per day in
    each of the two per-day queries (issue 34: about 0.8 s at 100,000 GPUs); the page's
    queries are now the same whatever day of the month it is."""
    _odd_reservations()
    client.force_login(AdminFactory())
    client.get("/fleet/utilization/")  # the session's first request
    second = _case_expressions(clock, client, datetime(2026, 11, 2, 1, 30, tzinfo=UTC))
    # (not in its last hour, whose hours' rows are a whole day's: one query fewer)
    last = _case_expressions(clock, client, datetime(2026, 11, 30, 21, 30, tzinfo=UTC))
    assert last == second
