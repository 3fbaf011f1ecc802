"""Fleet rows (issue 34: the utilization page at 100,000 GPUs): the hourly rollups of the
whole fleet summed per hour, day and bucket, kept by the write that changes the hourly
rows. They always equal the per-GPU rollups summed (computed here by the ORM), whatever
the sweep, a late sample or a release did; the utilization page reads them and shows the
figures the per-GPU rollups give (the open hour and today included), in the same
queries whatever the fleet's size; the migration's fill and the rebuild give the rows
the writes kept; concurrent writers of one hour keep the sums (PostgreSQL)."""

import importlib
from collections import defaultdict
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.models import Case, Count, F, Sum, When
from django.db.models.functions import TruncDate
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from gpuquota.core.timeutil import Period
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.reservations.models import Assignment
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.models import FleetDayUsage, FleetHourUsage, GpuHourUsage
from gpuquota.usage.rollup_fleet import rollup_fleet_rebuild
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    unreserved_busy_hours_named,
)
from gpuquota.usage.services import gpu_hour_recompute
from gpuquota.usage.to_date import rollup_sums
from tests.factories import NodeFactory, TeamFactory, make_gpu
from tests.helpers import run_concurrently
from tests.usage.factories import add_samples, reserve
from tests.usage.three_days import (
    D0,
    NOW,
    H,
    M,
    sweep,
    ten_minutes,
    three_days_history,
)

KEY = ("gpu_class_id", "kind", "owner", "split_ways", "failed")
BY = ("day", "gpu_class_id", "kind", "owner")



def _of_the_rollups(when: str) -> set[tuple]:
    """What the fleet rows of each hour (or day) must hold: the per-GPU hourly rows
    summed by the ORM, the owner team on unreserved rows only."""
    rows = GpuHourUsage.objects.annotate(
        owner=Case(When(kind="unreserved", then=F("team_id"))))
    if when == "day":
        rows = rows.annotate(day=TruncDate("hour", tzinfo=UTC))
    return set(rows.values(when, *KEY).order_by().annotate(
        n=Count("id"), covered=Sum("covered_s"), busy=Sum("busy_s"),
        util=Sum("util_weighted")).values_list(when, *KEY, "n", "covered", "busy", "util"))


def _stored(model, when: str) -> set[tuple]:
    return set(model.objects.values_list(when, *(k if k != "owner" else "owner_id"
                                                 for k in KEY),
                                         "hourly_rows", "covered_s", "busy_s", "util_weighted"))


def assert_fleet_rows_are_the_rollups_summed() -> None:
    for model, when in ((FleetHourUsage, "hour"), (FleetDayUsage, "day")):
        stored, expected = _stored(model, when), _of_the_rollups(when)
        assert stored == expected, (f"{when}: not in the rollups: {sorted(stored - expected)}; "
                                    f"missing: {sorted(expected - stored)}")


def _folded(rows: list[dict]) -> dict:
    """Sums per group, however many times a group came (whole days and hours apart)."""
    folded: dict = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        sums = folded[tuple(row[k] for k in (*BY, "failed", "split_ways"))]
        sums[0] += row["covered_s"]
        sums[1] += row["busy_s"]
        sums[2] += row["util_weighted"]
    return dict(folded)


@pytest.fixture
def days_fleet(db, clock):
    """tests/usage/three_days.py's history with the clock stopped at its end (the open hour
    and today partial): its reserved GPU."""
    clock.move_to(NOW)
    _, _, reserved = three_days_history()
    return reserved


PERIODS = [
    Period(datetime(2026, 11, 1, tzinfo=UTC), NOW),  # the month to date: today, open hour
    Period(NOW.replace(minute=0) - 24 * H, NOW),      # the last 24 h
    Period(NOW.replace(minute=0) - 7 * 24 * H, NOW),  # the last 7 days
    Period(D0, NOW),                                  # hours, whole days, hours
    Period.month(2026, 10),                           # a whole past month
]


@pytest.mark.parametrize("period", PERIODS)
def test_the_fleet_rows_give_the_per_gpu_rollups_sums(days_fleet, period):
    assert_fleet_rows_are_the_rollups_summed()
    fleet = _folded(rollup_sums(period=period, by=BY, fleet=True))
    assert fleet == _folded(rollup_sums(period=period, by=BY))
    owned = any(group[2] == "unreserved" and group[3] for group in fleet)
    assert fleet and (owned or period.start > D0)  # the users' processes from D0 + 3 h


@pytest.mark.parametrize("query, period", [("", PERIODS[0]), ("?last=24h", PERIODS[1]),
                                           ("?last=7d", PERIODS[2]),
                                           ("?month=2026-10", PERIODS[4])])
def test_the_utilization_page_shows_what_the_per_gpu_rollups_give(days_fleet, admin_client,
                                                                  query, period):
    overview = admin_client.get(reverse("fleet_utilization") + query).context["overview"]
    assert overview.fleet == fleet_utilization(period=period)
    assert overview.classes == classes_utilization(period=period)
    assert overview.fleet_days == daily_usage(period=period)
    assert overview.unreserved == unreserved_busy_hours_named(period=period)
    assert overview.fleet.sums.covered_s


def test_a_late_sample_and_a_release_change_the_fleet_rows_with_the_hours(days_fleet):
    reserved = days_fleet
    before = _stored(FleetHourUsage, "hour")
    add_samples(reserved, [{"start": D0 + 30 * H + 5 * M, "seconds": 30, "util": 100}])
    sweep()
    assert_fleet_rows_are_the_rollups_summed()
    assert _stored(FleetHourUsage, "hour") != before
    assignment = Assignment.objects.get(gpu=reserved)
    released, end = D0 + 30 * H, assignment.assigned_until
    Assignment.objects.filter(pk=assignment.pk).update(assigned_until=released)
    gpu_interval_mark_dirty(gpu_ids=[reserved.id], start=released, end=end)
    sweep()  # reserved buckets of the later hours go (their fleet rows too); unreserved come
    assert_fleet_rows_are_the_rollups_summed()
    assert not FleetHourUsage.objects.filter(kind="reserved", hour__gte=released).exists()


def test_rebuild_and_the_migrations_fill_give_the_rows_the_writes_kept(days_fleet):
    kept = (_stored(FleetHourUsage, "hour"), _stored(FleetDayUsage, "day"))
    FleetHourUsage.objects.filter(hour__gte=D0 + 26 * H).delete()  # from Oct 31
    FleetDayUsage.objects.filter(day__gte=(D0 + 26 * H).date()).delete()
    assert rollup_fleet_rebuild(start=(D0 + 26 * H).date()) >= 3
    assert (_stored(FleetHourUsage, "hour"), _stored(FleetDayUsage, "day")) == kept
    FleetHourUsage.objects.all().delete()
    FleetDayUsage.objects.all().delete()
    migration = importlib.import_module("gpuquota.usage.migrations.0011_fleet_usage")
    with connection.cursor() as cursor:  # what the fill uses of a schema editor
        migration.fleet_rows_fill(None, SimpleNamespace(connection=connection,
                                                        execute=cursor.execute))
    assert (_stored(FleetHourUsage, "hour"), _stored(FleetDayUsage, "day")) == kept


def test_the_page_reads_the_fleet_rows_in_the_same_queries_whatever_the_fleet(db, clock,
                                                                              admin_client):
    clock.move_to(NOW)
    node = NodeFactory()
    team = TeamFactory(slug="vision")

    def page_queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(reverse("fleet_utilization")).status_code == 200
        return len(queries), sum("usage_gpuhourusage" in q["sql"] or "usage_gpudayusage"
                                 in q["sql"] for q in queries.captured_queries)
    counts = []
    for size in (2, 8):
        for index in range(len(counts) * 2, size):
            gpu = make_gpu(node=node, index=index, at=D0 - H)
            ten_minutes(gpu, NOW - 4 * H, 24, lambda i: 50)
            if index % 2:
                reserve(team, gpu, NOW - 3 * H, NOW + H)
        sweep()
        counts.append(page_queries())
    assert counts[0] == counts[1] and counts[0][1] == 0  # no per-GPU rollup read
    assert FleetHourUsage.objects.filter(hour=NOW.replace(minute=0)).count() <= 3


@pytest.mark.postgres
def test_writers_of_one_hour_of_many_gpus_at_once_keep_the_fleet_sums(transactional_db):
    """Each GPU's hours recomputed by its own worker at the same instant, from no fleet
    row at all: the writers race to create the same fleet buckets and to add to them."""
    node = NodeFactory()
    team = TeamFactory(slug="vision")
    gpus = [make_gpu(node=node, index=i, at=D0 - H) for i in range(4)]
    for gpu in gpus:
        ten_minutes(gpu, D0 + 2 * H, 24, lambda i: 5 * i)
    reserve(team, gpus[0], D0 + 2 * H + 30 * M, D0 + 5 * H)
    hours = [D0 + (2 + h) * H for h in range(4)]
    jobs = [lambda gpu=gpu: [gpu_hour_recompute(gpu_id=gpu.id, hour=hour) for hour in hours]
            for gpu in gpus]
    assert not [r for r in run_concurrently(jobs) if isinstance(r, Exception)]
    assert_fleet_rows_are_the_rollups_summed()
    assert FleetHourUsage.objects.filter(hourly_rows=4).exists()
    assert FleetDayUsage.objects.filter(hourly_rows__gte=12).exists()


def test_the_team_page_reads_lent_busy_seconds_from_the_rollups_as_exact(db, clock):
    """The team page's lent GPUs' busy seconds come from the rollups (issue 34: not the
    open hour's raw samples, attributed with every team's accounts, on each request), and
    equal the exact selectors' once the open hour's rollup is current."""
    from gpuquota.usage.history import team_month_context
    from gpuquota.usage.selectors import team_reservations_utilization
    from tests.reports.test_lending_money import World

    clock.move_to(NOW)
    world = World()
    world.reserve(NOW - 30 * H, NOW + 5 * H)
    world.lend(NOW - 3 * H - 20 * M)
    world.busy(NOW - 3 * H, 150, "bob")  # a borrower's job, into the open hour
    sweep()
    context = team_month_context(team=world.vision, month=Period.month(2026, 11), now=NOW)
    usage = context["reservation_usage"]
    assert usage == team_reservations_utilization(team=world.vision,
                                                  period=context["usage_period"])
    assert usage[0].figures.lent_busy_s == 70 * 60  # bob's minutes of Nov 1, 00:00-01:10
