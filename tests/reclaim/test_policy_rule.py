"""The evidence-aware look-back (RECLAIM_RULE=evidence): an empty GPU (no process, no
memory) is idle after the short window, one holding memory (a notebook kernel) only
after the long one; the spec rule stays selectable. The evaluation and the backtest
apply the same rule; the evaluation's reads are set-based (bounded queries)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuquota.usage.models import GpuHourUsage
from reclaim.backtest import policy_backtest
from reclaim.conf import policy
from reclaim.evaluation import findings_evaluate
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate
from tests.reclaim.factories import GIB, NOW, World, held_gpus, rollup, telemetry

H = timedelta(hours=1)
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _evidence(settings):
    settings.RECLAIM_RULE = "evidence"
    settings.RECLAIM_EMPTY_LOOKBACK_S = 2 * 3600
    settings.RECLAIM_LOOKBACK_S = 3 * 3600
    settings.RECLAIM_HELD_LOOKBACK_S = 5 * 3600


def states(rec):
    return {int(g): ev["state"] for g, ev in rec.evidence["gpus"].items()}


def test_an_empty_gpu_goes_after_the_short_window_a_notebook_after_the_long_one():
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 4 * H)
    empty, notebook = held_gpus(reservation)
    telemetry(empty, start=NOW - 4 * H, end=NOW, util=lambda i: 80 if i < 60 else 0)
    telemetry(notebook, start=NOW - 6 * H, end=NOW + 2 * H, util=0, memory=30 * GIB,
              user="alice")
    rollup()
    recommendations_evaluate(now=NOW)
    [rec] = Recommendation.objects.all()
    assert list(rec.gpus.all()) == [empty]
    assert states(rec) == {empty.id: "idle", notebook.id: "watched"}
    assert rec.evidence["gpus"][str(empty.id)]["rule"] == "empty"
    assert rec.evidence["gpus"][str(empty.id)]["window_s"] == 2 * 3600
    assert not Recommendation.objects.filter(kind="right_size").exists()
    # with the spec's rule both are idle over the 3 h look-back
    found = findings_evaluate(reservations=[reservation], now=NOW,
                              policy=policy().override(rule="spec"))
    assert set(found[reservation.id].of_kind("reclaim").gpu_ids) == {empty.id, notebook.id}


def test_the_notebook_is_recommended_once_it_has_run_the_long_window():
    world = World.create()
    reservation = world.reserve(count=1, start=NOW - 6 * H)
    [notebook] = held_gpus(reservation)
    telemetry(notebook, start=NOW - 6 * H, end=NOW + 2 * H, util=0, memory=30 * GIB,
              user="alice")
    rollup()
    recommendations_evaluate(now=NOW - 2 * H)  # ran 4 h: idle over 3 h, held: watched
    assert not Recommendation.objects.filter(kind="reclaim").exists()
    recommendations_evaluate(now=NOW)
    [rec] = Recommendation.objects.filter(kind="reclaim")
    ev = rec.evidence["gpus"][str(notebook.id)]
    assert ev["rule"] == "held" and ev["window_s"] == 5 * 3600
    assert ev["memory_used_bytes_max"] == 30 * GIB


def test_the_evaluation_reads_in_a_bounded_number_of_queries():
    world = World.create(gpus=8)
    counts = []
    for n in (1, 3):  # all busy: nothing to write, only the reads
        for _ in range(n):
            r = world.reserve(count=1, start=NOW - 6 * H)
            for g in held_gpus(r):
                telemetry(g, start=NOW - 6 * H, end=NOW, util=85)
        rollup()
        with CaptureQueriesContext(connection) as captured:
            recommendations_evaluate(now=NOW)
        counts.append(len(captured))
    assert counts[0] == counts[1], counts


def test_the_backtest_applies_the_evidence_rule():
    world = World.create()
    reservation = world.reserve(count=2, start=NOW - 2 * 24 * H, end=NOW + 24 * H)
    empty, notebook = reservation.assignments.select_related("gpu", "reservation"
                                                             ).order_by("gpu_id")
    rows = []
    for a, memory in ((empty, None), (notebook, 30 * GIB)):
        hour = NOW - 2 * 24 * H
        while hour < NOW:
            busy = 3600 if hour < NOW - 25 * H else 0
            rows.append(GpuHourUsage(
                gpu_id=a.gpu_id, hour=hour, gpu_class_id=a.gpu.gpu_class_id, kind="reserved",
                assignment=a, reservation_id=a.reservation_id, team_id=a.reservation.team_id,
                covered_s=3600, busy_s=busy, util_weighted=Decimal(80 * busy),
                memory_used_bytes_max=memory, computed_at=timezone.now()))
            hour += H
    GpuHourUsage.objects.bulk_create(rows)
    result = policy_backtest(policy=policy(), days=1, now=NOW)
    at = {g: r.recommended_at for r in result.recommendations for g in r.gpu_ids}
    # busy until −25 h: empty idle over 2 h at −23 h; the notebook over 5 h at −20 h
    assert at == {empty.gpu_id: NOW - 23 * H, notebook.gpu_id: NOW - 20 * H}
    spec = policy_backtest(policy=policy().override(rule="spec"), days=1, now=NOW)
    assert {g: r.recommended_at for r in spec.recommendations for g in r.gpu_ids} == {
        empty.gpu_id: NOW - 22 * H, notebook.gpu_id: NOW - 22 * H}
