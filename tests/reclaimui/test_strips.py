"""The review page's strip chart tells the same story as the evidence beside it: it spans
the recommendation's exact look-back window (not the whole hours around it), and the part
of each GPU's strip that is shaded as reported is its coverage. Before, whole-hour cells
from the rollups showed about 40 % of a window reported whose coverage read 87 %."""

import re
from datetime import timedelta
from fractions import Fraction

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from gpuquota.ingest import conf as ingest_conf
from gpuquota.ingest.models import Sample
from gpuquota.outbox.services import gpu_interval_mark_dirty
from gpuquota.usage.sweep import dirty_hours_process
from reclaim.models import Recommendation
from reclaim.selectors_pages import review_context
from reclaim.services import recommendations_evaluate
from tests.reclaimui.factories import LOOKBACK_H, reclaim_fleet

pytestmark = pytest.mark.django_db


def _strip(svg: str, label: str) -> list[tuple[int, int]]:
    """(covered seconds, seconds) of each piece of one GPU's strip."""
    strip = svg.split(f'<g class="strip" data-label="{label}">')[1].split('<g class="strip"')[0]
    return [(int(c), int(s)) for c, s in
            re.findall(r'data-covered-s="(\d+)" data-seconds="(\d+)"', strip)]


def test_the_strip_spans_the_window_and_its_reported_part_is_the_coverage(client, roles):
    fleet = reclaim_fleet(roles)
    notebook = fleet.reservations[0]
    idle = notebook.assignments.order_by("gpu__index").first().gpu
    now = fleet.now
    gap_start, gap_end = now - timedelta(minutes=70), now - timedelta(minutes=50)  # 20 of 120
    with transaction.atomic():
        Sample.objects.filter(gpu=idle, window_start__gte=gap_start,
                              window_start__lt=gap_end).delete()
        gpu_interval_mark_dirty(gpu_ids=[idle.id], start=gap_start, end=gap_end)
    dirty_hours_process()
    recommendations_evaluate(now=now)
    rec = Recommendation.objects.get(reservation=notebook, kind="reclaim",
                                     status__in=Recommendation.LIVE)
    assert (rec.window_start, rec.window_end) == (now - timedelta(hours=LOOKBACK_H), now)
    coverage = Fraction(rec.evidence["gpus"][str(idle.id)]["coverage"])
    assert abs(coverage - Fraction(100, 120)) < Fraction(1, 100)

    [view] = [v for v in review_context(now=now)["open"] if v.rec.pk == rec.pk]
    pieces = _strip(str(view.chart), f"▸ {idle.node.hostname}/{idle.index}")
    assert sum(s for _c, s in pieces) == LOOKBACK_H * 3600  # exactly the window, edges too
    share = Fraction(sum(c for c, _s in pieces), LOOKBACK_H * 3600)
    assert abs(share - coverage) < Fraction(1, 100), (share, coverage)

    client.force_login(roles.admin)
    body = client.get(reverse("reclaim_review")).content.decode()
    assert "min reported" in body
    assert f'id="rec-{rec.pk}"' in body


def test_the_edges_kept_by_the_evaluation_draw_the_chart_the_samples_drew(roles, clock):
    """The partial edge hours of the window are drawn from the figures the evaluation kept
    in the evidence (issue 34: the page read every charted GPU's samples of both edges
    again), the same chart as computed from the samples, which a recommendation evaluated
    before they were kept still gets; once their samples have expired they are unknown."""
    clock.move_to(clock.now.replace(minute=17, second=23))  # both edges partial
    fleet = reclaim_fleet(roles, extra=2)
    recs = list(Recommendation.objects.filter(status__in=Recommendation.LIVE))
    assert recs and all(len(rec.evidence["edges"]) == 2 for rec in recs)
    assert any(gpus for rec in recs for edge in rec.evidence["edges"]
               for gpus in edge["gpus"].values())  # samples were there to count

    with CaptureQueriesContext(connection) as read:
        kept = {v.rec.pk: str(v.chart) for v in review_context(now=fleet.now)["open"]}
    assert not [q for q in read.captured_queries if "ingest_sample" in q["sql"]]
    for rec in recs:  # as evaluated before this change: no edges in the evidence
        rec.evidence = {k: v for k, v in rec.evidence.items() if k != "edges"}
        rec.save(update_fields=["evidence"])
    with CaptureQueriesContext(connection) as read:
        computed = {v.rec.pk: str(v.chart) for v in review_context(now=fleet.now)["open"]}
    assert [q for q in read.captured_queries if "ingest_sample" in q["sql"]]
    assert kept and kept == computed

    recommendations_evaluate(now=fleet.now)  # kept again
    assert all(rec.evidence.get("edges") for rec in Recommendation.objects.filter(
        status__in=Recommendation.LIVE))
    clock.shift(timedelta(days=ingest_conf.RAW_SAMPLE_RETENTION_DAYS))
    [view, *_] = review_context(now=clock.now)["open"]
    assert "samples expired" in str(view.chart)
