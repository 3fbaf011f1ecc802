"""Chargeable seconds per team, class in force and rate card in force, hand-computed
(accounting.md: Chargeback, Reservation, Usage samples)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.inventory.services import gpu_reclassify
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.pricing import chargeable_seconds, rate_card_gaps
from gpuquota.usage.sweep import dirty_hours_process
from reports.pricing import team_drafts
from tests.factories import EPOCH, GpuClassFactory, RateCardFactory, TeamFactory, make_gpu
from tests.usage.factories import T0, add_processes, minute_samples, reserve, team_with_user

pytestmark = pytest.mark.django_db
H, M, S = timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1)
PERIOD = Period(T0, T0 + 2 * H)


def _split_cards(gpu_class, at):
    old = RateCardFactory(gpu_class=gpu_class, valid_from=EPOCH, valid_until=at,
                          reserved_rate=Decimal("2.00"))
    new = RateCardFactory(gpu_class=gpu_class, valid_from=at, reserved_rate=Decimal("2.50"))
    return old, new


def test_rate_change_inside_an_hour_splits_reserved_and_on_demand_seconds():
    klass = GpuClassFactory(name="H100")
    old, new = _split_cards(klass, T0 + 30 * M + 15 * S)
    reserved_gpu, idle_gpu = make_gpu(gpu_class=klass), make_gpu(gpu_class=klass)
    team = TeamFactory(slug="vision")
    reserve(team, reserved_gpu, T0 + 10 * M, T0 + H + 10 * M)
    minute_samples(idle_gpu, T0, 60, util=50)  # busy, unreserved, no process: unattributed
    dirty_hours_process()

    # the stored rollup of that hour is cut at the card boundary
    cut = GpuHourUsage.objects.filter(gpu=idle_gpu, hour=T0).values_list("rate_card_id", "busy_s")
    assert sorted(cut) == [(old.id, 1815), (new.id, 1785)]

    found = chargeable_seconds(period=PERIOD)
    assert found.reserved == [
        {"team_id": team.id, "gpu_class_id": klass.id, "rate_card_id": old.id, "seconds": 1215},
        {"team_id": team.id, "gpu_class_id": klass.id, "rate_card_id": new.id, "seconds": 2385},
    ]
    assert found.failed_reserved == []
    assert found.on_demand == [
        {"team_id": None, "gpu_class_id": klass.id, "rate_card_id": old.id, "split_ways": 1,
         "busy_s": 1815},
        {"team_id": None, "gpu_class_id": klass.id, "rate_card_id": new.id, "split_ways": 1,
         "busy_s": 1785},
    ]
    # a partial edge hour is computed from the raw samples with the same cut
    edge = chargeable_seconds(period=Period(T0, T0 + 45 * M))
    assert [(r["rate_card_id"], r["busy_s"]) for r in edge.on_demand] == [
        (old.id, 1815), (new.id, 885)]
    assert [(r["rate_card_id"], r["seconds"]) for r in edge.reserved] == [
        (old.id, 1215), (new.id, 885)]


def test_class_change_prices_each_second_in_its_class_and_names_the_uncarded_seconds():
    priced, unpriced = GpuClassFactory(name="A100"), GpuClassFactory(name="A100-new")
    card = RateCardFactory(gpu_class=priced, valid_from=EPOCH)
    gpu = make_gpu(gpu_class=priced)
    team = TeamFactory(slug="speech")
    reserve(team, gpu, T0, T0 + H)
    gpu_reclassify(gpu=gpu, gpu_class=unpriced, at=T0 + 20 * M)
    found = chargeable_seconds(period=PERIOD)
    assert found.reserved == [
        {"team_id": team.id, "gpu_class_id": priced.id, "rate_card_id": card.id,
         "seconds": 1200},
        {"team_id": team.id, "gpu_class_id": unpriced.id, "rate_card_id": None,
         "seconds": 2400},
    ]
    assert rate_card_gaps(gpu_class_ids=[unpriced.id, priced.id], period=PERIOD) == {
        unpriced.id: [(T0, T0 + 2 * H)], priced.id: []}


def test_rate_card_gaps_between_and_around_cards():
    klass = GpuClassFactory()
    RateCardFactory(gpu_class=klass, valid_from=T0 + 10 * M, valid_until=T0 + 20 * M)
    RateCardFactory(gpu_class=klass, valid_from=T0 + 30 * M, valid_until=T0 + H)
    assert rate_card_gaps(gpu_class_ids=[klass.id], period=Period(T0, T0 + 90 * M)) == {
        klass.id: [(T0, T0 + 10 * M), (T0 + 20 * M, T0 + 30 * M), (T0 + H, T0 + 90 * M)]}


def test_failure_inside_a_reservation_approved_after_its_start():
    klass = GpuClassFactory()
    card = RateCardFactory(gpu_class=klass, valid_from=EPOCH)
    gpu = make_gpu(gpu_class=klass)
    team = TeamFactory(slug="robotics")
    reserve(team, gpu, T0, T0 + 2 * H, approved_at=T0 + 15 * M)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + 5 * M,
                                     valid_until=T0 + 45 * M)
    GpuHealthInterval.objects.create(gpu=gpu, state="degraded", valid_from=T0 + 45 * M,
                                     valid_until=T0 + 50 * M)
    found = chargeable_seconds(period=PERIOD)
    key = {"team_id": team.id, "gpu_class_id": klass.id, "rate_card_id": card.id}
    assert found.reserved == [{**key, "seconds": 6300}]  # charged from approval
    assert found.failed_reserved == [{**key, "seconds": 1800}]  # failed and charged
    assert chargeable_seconds(period=PERIOD, team_ids=[team.id + 1000]).reserved == []


def test_on_demand_split_between_teams_unattributed_and_failed_time_left_out():
    klass = GpuClassFactory()
    card = RateCardFactory(gpu_class=klass, valid_from=EPOCH)
    gpu = make_gpu(gpu_class=klass)
    cluster = gpu.node.cluster
    alpha, _ = team_with_user("alpha", "alice", cluster)
    beta, _ = team_with_user("beta", "bob", cluster)
    minute_samples(gpu, T0, 60, util=80)
    add_processes(gpu, T0, 20, user="alice", pid=1)
    add_processes(gpu, T0, 10, user="bob", pid=2)
    GpuHealthInterval.objects.create(gpu=gpu, state="failed", valid_from=T0 + 50 * M,
                                     valid_until=T0 + H)
    gpu_interval_mark_dirty(gpu_ids=[gpu.id], start=T0, end=T0 + H)
    dirty_hours_process()

    def row(team, ways, busy):
        return {"team_id": team and team.id, "gpu_class_id": klass.id, "rate_card_id": card.id,
                "split_ways": ways, "busy_s": busy}

    found = chargeable_seconds(period=PERIOD)
    assert sorted(found.on_demand, key=lambda r: (r["team_id"] or 0, r["split_ways"])) == [
        row(None, 1, 1800), row(alpha, 1, 600), row(alpha, 2, 600), row(beta, 2, 600)]
    only_alpha = chargeable_seconds(period=PERIOD, team_ids=[alpha.id])
    assert sorted(r["split_ways"] for r in only_alpha.on_demand) == [1, 2]
    assert {r["team_id"] for r in only_alpha.on_demand} == {alpha.id}


def _gap_queries(classes: int, teams: int) -> tuple[int, dict]:
    for c in range(classes):
        klass = GpuClassFactory(name=f"U{classes}-{c}")
        RateCardFactory(gpu_class=klass, valid_from=T0 + H)  # the first hour unpriced
        for t in range(teams):
            reserve(TeamFactory(slug=f"t{classes}-{c}-{t}"), make_gpu(gpu_class=klass),
                    T0, T0 + 2 * H)
    with CaptureQueriesContext(connection) as captured:
        drafts = team_drafts(period=PERIOD, month=PERIOD.start.date())
    return sum("reports_ratecard" in q["sql"] for q in captured), drafts


def test_the_periods_without_a_rate_card_are_read_once_for_every_team_and_class():
    """A draft's rate-card gaps were a query per team, class and kind unpriced (the team
    page's queries grew with the classes without cards, statements-refresh-open's with the
    teams): one query now, the same errors."""
    small, drafts = _gap_queries(1, 1)
    large, more = _gap_queries(3, 2)
    assert small == large
    errors = sorted(e for d in more.values() for e in d.errors)
    assert len(errors) == 7 and errors[-1] == (
        f"No rate card for U3-2 from {T0:%Y-%m-%d %H:%M}Z to {T0 + H:%Y-%m-%d %H:%M}Z: "
        "3600 s of reserved time cannot be priced.")
