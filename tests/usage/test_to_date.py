"""The pages' figures to date from the rollups alone: equal to the exact selectors once the
open hour's rollup is current, as of when they say, in a number of queries that does
not grow with the fleet."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.core.timeutil import Period
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.freshness import usage_freshness
from gpuquota.usage.history import team_month_context
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    team_reservations_utilization,
    team_utilization,
    unreserved_busy_hours_named,
)
from gpuquota.usage.sweep import dirty_hours_process
from gpuquota.usage.to_date import rollup_hours, utilization_overview
from tests.factories import NodeFactory, TeamFactory, make_gpu
from tests.usage.factories import (
    T0,
    minute_samples,
    mixed_fleet,
    reserve,
)

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)
NOW = T0 + 2 * H + 30 * M  # 00:30 on Nov 1: the open hour is half done
OCT, NOV = Period.month(2026, 10), Period.month(2026, 11)


def fleet(size: int = 1):
    """Team "vision" with the mixed fleet (`tests.usage.factories.mixed_fleet`): a
    reserved GPU (busy, then idle), an unreserved GPU used by a team's user, a GPU of
    another class failed for half an hour, per unit of `size`."""
    team = TeamFactory(slug="vision")
    return team, mixed_fleet(team, size)


@pytest.mark.parametrize("period", [Period(T0, NOW), Period(T0 + H, T0 + 2 * H),
                                    Period(T0, T0 + 2 * H)])
def test_the_utilization_overview_equals_the_exact_selectors_once_rollups_are_current(period):
    fleet(2)
    overview = utilization_overview(period=period, unreserved=True)
    assert overview.fleet == fleet_utilization(period=period)
    assert overview.classes == classes_utilization(period=period)
    assert overview.fleet_days == daily_usage(period=period)
    assert overview.class_days == [(klass, daily_usage(period=period, gpu_class=klass))
                                   for klass, _f in overview.classes]
    assert overview.unreserved == unreserved_busy_hours_named(period=period)
    assert overview.fleet.sums.busy_s and "Ml" in [r["team"] for r in overview.unreserved]
    assert len(overview.classes) == 2


def test_the_team_figures_equal_the_exact_selectors_once_rollups_are_current():
    team, _ml = fleet(2)
    for month in (OCT, NOV):
        context = team_month_context(team=team, month=month, now=NOW)
        period = context["usage_period"]
        assert period == month.to_date(NOW)
        assert context["reservation_usage"] == team_reservations_utilization(team=team,
                                                                             period=period)
        assert context["daily_usage"] == daily_usage(period=period, team=team)
        for row in context["trend"]:
            assert row.figures == team_utilization(team=team, period=row.period)
        assert context["trend"][-1].figures.sums.covered_s > 0
        assert context["usage_freshness"].pending_gpu_hours == 0


def test_the_open_hour_is_read_as_last_computed_and_the_freshness_says_since_when():
    team, _ml = fleet()
    assert usage_freshness(since=T0, now=NOW).as_of == NOW  # nothing pending
    gpu = team.reservations.get().assignments.get().gpu
    later = NOW + 10 * M
    minute_samples(gpu, NOW, 10, util=80)  # stored now: marks the open hour for later
    period = Period(T0, later)
    overview = utilization_overview(period=period, unreserved=False)
    exact = fleet_utilization(period=period)
    assert overview.fleet.reserved.reserved_s == exact.reserved.reserved_s  # to `later`
    assert exact.sums.busy_s - overview.fleet.sums.busy_s == 600  # not recomputed yet
    freshness = usage_freshness(since=T0, now=later)
    assert freshness.pending_gpu_hours == 1
    # as of the first change not rolled up yet: the mark made just now (real time)
    from gpuquota.outbox.models import DirtyGpuHour

    mark = DirtyGpuHour.objects.get()
    assert freshness.as_of == min(later, mark.marked_at.replace(microsecond=0))
    assert usage_freshness(since=T0 + 3 * H, now=later).pending_gpu_hours == 0
    assert usage_freshness(since=T0, until=T0 + 2 * H, now=later).as_of == later
    dirty_hours_process()
    assert utilization_overview(period=period, unreserved=False).fleet == \
        fleet_utilization(period=period)


def test_a_page_period_starts_on_a_whole_hour():
    assert rollup_hours(Period(T0, NOW)) == (T0, T0 + 3 * H)
    assert rollup_hours(Period(T0, T0 + H)) == (T0, T0 + H)
    with pytest.raises(ValueError):
        rollup_hours(Period(T0 + M, NOW))


def _queries(call) -> int:
    with CaptureQueriesContext(connection) as queries:
        call()
    return len(queries)


def test_the_page_figures_take_the_same_queries_whatever_the_fleet_size():
    counts = []
    for size in (1, 4):
        team, _ml = fleet(size) if size == 1 else (team_more(size), None)
        counts.append((
            _queries(lambda: utilization_overview(period=Period(T0, NOW), unreserved=True)),
            _queries(lambda team=team: team_month_context(team=team, month=NOV, now=NOW)),
        ))
    assert counts[0] == counts[1]
    overview_queries, team_queries = counts[0]
    assert overview_queries <= 14 and team_queries <= 13


def team_more(size: int):
    """More reserved GPUs and reservations for the team `fleet` made."""
    from accounts.models import Team

    team = Team.objects.get(slug="vision")
    node = NodeFactory()
    for i in range(size):
        gpu = make_gpu(node=node, index=i, at=T0 - H)
        minute_samples(gpu, T0, 150, util=50)
        reserve(team, gpu, T0 + i * M, T0 + 4 * H)
    dirty_hours_process()
    return team
