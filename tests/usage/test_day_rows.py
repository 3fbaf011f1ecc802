"""Day rows (issue 12: a month of 10,000 GPUs under a second): the hourly rollups of a GPU
and UTC day summed per bucket, kept by the write that changes the hourly rows. They
always equal the hourly rows summed (`oracle_days`), whatever the sweep, a late sample,
a reservation's release or two writers at once did; the pages read whole days from them
and give the exact selectors' figures; PostgreSQL refuses a row that is not a sum."""

import importlib
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from gpuquota.core.timeutil import Period
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.models import Assignment
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.history import team_month_context
from gpuquota.usage.models import GpuDayUsage
from gpuquota.usage.rollup_days import rollup_days_rebuild
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    team_reservations_utilization,
    team_utilization,
    unreserved_busy_hours_named,
)
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.to_date import rollup_sums, utilization_overview
from tests.factories import NodeFactory, TeamFactory, make_gpu
from tests.helpers import run_concurrently
from tests.usage.factories import add_samples, reserve
from tests.usage.oracle_days import (
    assert_day_rows_are_the_hours_summed,
    day_rows_of_the_hours,
    day_rows_stored,
)
from tests.usage.three_days import (
    D0,
    NOW,
    H,
    M,
    sweep,
    ten_minutes,
    three_days_history,
)


@pytest.fixture
def days_fleet(db):
    """tests/usage/three_days.py's history: (vision, ml, the reserved GPU)."""
    return three_days_history()


@pytest.mark.parametrize("period", [
    Period(D0, NOW),                                      # the hours around three whole days
    Period(datetime(2026, 10, 30, tzinfo=UTC), NOW),       # starting on midnight
    Period(D0 + 5 * H, D0 + 5 * H + timedelta(days=2)),   # 7 days' shape: 2 days, mid-day
    Period.month(2026, 10),                               # a whole past month
])
def test_the_pages_read_whole_days_and_give_the_exact_figures(days_fleet, period):
    assert_day_rows_are_the_hours_summed()
    overview = utilization_overview(period=period, unreserved=True)
    assert overview.fleet == fleet_utilization(period=period)
    assert overview.classes == classes_utilization(period=period)
    assert overview.fleet_days == daily_usage(period=period)
    assert overview.unreserved == unreserved_busy_hours_named(period=period)
    assert overview.fleet.reserved.sums.busy_s and len(overview.unreserved) >= 2


def test_the_team_month_and_trend_from_day_rows_equal_the_exact_selectors(days_fleet):
    team, _ml, _gpu = days_fleet
    context = team_month_context(team=team, month=Period.month(2026, 10), now=NOW)
    period = context["usage_period"]
    assert context["reservation_usage"] == team_reservations_utilization(team=team,
                                                                         period=period)
    assert context["daily_usage"] == daily_usage(period=period, team=team)
    november = team_month_context(team=team, month=Period.month(2026, 11), now=NOW)
    for row in november["trend"]:
        assert row.figures == team_utilization(team=team, period=row.period)
    assert context["reservation_usage"][0].figures.sums.busy_s > 0


def test_whole_days_are_one_query_on_the_day_rows_and_each_edge_one_on_the_hours(days_fleet):
    for period, hourly in ((Period(D0, NOW), 2), (Period(D0 - 3 * H, D0 + 3 * H), 1),
                           (Period.month(2026, 10), 0)):
        with CaptureQueriesContext(connection) as queries:
            rows = rollup_sums(period=period, by=("day", "kind"))
        tables = ["usage_gpudayusage" in q["sql"] for q in queries.captured_queries]
        assert sorted(tables) == [False] * hourly + [True] * (period.end - period.start >
                                                             timedelta(days=1))
    rows = rollup_sums(period=Period(D0, NOW), by=("day", "kind"))
    assert {row["day"] for row in rows} == {D0.date() + timedelta(days=d) for d in range(4)}
    assert GpuDayUsage.objects.filter(day=D0.date() + timedelta(days=1)).count() >= 3


def test_a_late_sample_and_a_release_change_the_day_rows_with_the_hours(days_fleet):
    _team, _ml, reserved = days_fleet
    before = day_rows_stored()
    add_samples(reserved, [{"start": D0 + 30 * H + 5 * M, "seconds": 30, "util": 100}])
    sweep()
    assert_day_rows_are_the_hours_summed()
    assert day_rows_stored() != before
    assignment = Assignment.objects.get(gpu=reserved)
    released = D0 + 30 * H
    end = assignment.assigned_until
    Assignment.objects.filter(pk=assignment.pk).update(assigned_until=released)
    gpu_interval_mark_dirty(gpu_ids=[reserved.id], start=released, end=end)
    sweep()  # reserved buckets of the later hours go; unreserved ones come
    assert_day_rows_are_the_hours_summed()
    assert not GpuDayUsage.objects.filter(reservation=assignment.reservation,
                                          day__gt=released.date()).exists()


def test_rebuild_and_the_migrations_fill_give_the_rows_the_writes_kept(days_fleet):
    kept = day_rows_stored()
    GpuDayUsage.objects.filter(day=D0.date() + timedelta(days=1)).delete()
    assert rollup_days_rebuild(start=D0.date() + timedelta(days=1),
                               end=D0.date() + timedelta(days=2)) >= 3
    assert day_rows_stored() == kept
    GpuDayUsage.objects.all().delete()
    migration = importlib.import_module("gpuquota.usage.migrations.0006_gpudayusage")
    with connection.cursor() as cursor:  # what the fill uses of a schema editor
        migration.day_rows_fill(None, SimpleNamespace(connection=connection,
                                                      execute=cursor.execute))
    assert day_rows_stored() == kept
    GpuDayUsage.objects.all().delete()
    rollup_days_rebuild()
    assert day_rows_stored() == kept == day_rows_of_the_hours()


@pytest.mark.postgres
def test_postgres_refuses_a_day_row_that_is_not_a_sum(days_fleet):
    row = GpuDayUsage.objects.filter(kind="reserved").first()
    columns = ("gpu_id, day, gpu_class_id, kind, assignment_id, reservation_id, team_id, "
               "split_ways, failed, hours, covered_s, busy_s, util_weighted")
    values = [row.gpu_id, row.day, row.gpu_class_id, row.kind, row.assignment_id,
              row.reservation_id, row.team_id, row.split_ways, row.failed]
    for sums, constraint in (((1, 10, 10, 0), "usage_day_bucket_unique"),  # the same bucket
                             ((0, 0, 0, 0), "usage_day_sums_valid"),       # no hour in it
                             ((1, 10, 20, 0), "usage_day_sums_valid")):    # busy > covered
        with pytest.raises(IntegrityError, match=constraint), transaction.atomic(), \
                connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO usage_gpudayusage ({columns}) VALUES "
                           f"({', '.join(['%s'] * 13)})", [*values, *sums])


@pytest.mark.postgres
def test_writers_of_hours_of_one_gpu_day_at_once_keep_the_sums(transactional_db):
    """Four hours of each GPU's day recomputed at the same instant, from no day row at
    all: the writers race to create the same day buckets and to update them."""
    node = NodeFactory()
    team = TeamFactory(slug="vision")
    gpus = [make_gpu(node=node, index=i, at=D0 - H) for i in range(3)]
    for gpu in gpus:
        ten_minutes(gpu, D0 + 2 * H, 24, lambda i: 5 * i)
    reserve(team, gpus[0], D0 + 2 * H + 30 * M, D0 + 5 * H)
    hours = [D0 + (2 + h) * H for h in range(4)]
    jobs = [lambda hour=hour: [gpu_hour_recompute(gpu_id=g.id, hour=hour) for g in gpus]
            for hour in hours]
    assert not [r for r in run_concurrently(jobs) if isinstance(r, Exception)]
    assert_day_rows_are_the_hours_summed()
    assert GpuDayUsage.objects.filter(hours=4).count() >= 2
