"""The demo's promise (issue 10, "Done means"; issue 19, "Hard reclaim stays"): with the
demo's shortened look-back and the default guarded rule, the simulated abandoned GPU
becomes a recommendation while the open notebook beside it is kept ("guarded: held");
an admin accepts it; the lead's mail holds the notice; after the shortened grace the GPU
is free again and the reservation is charged for it up to the reclaim instant only."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import User
from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.demo.history import demo_history_backfill
from gpuquota.demo.organisation import FAULTY_NODE, demo_organisation_seed
from gpuquota.demo.reclaim import demo_reclaim_seed
from gpuquota.demo.reservations import demo_reservations_seed
from gpuquota.reservations.capacity import free_map
from gpuquota.usage.seconds import reserved_seconds
from reclaim.conf import policy
from reclaim.lifecycle import recommendation_accept, recommendations_release_due
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_demo_abandoned_gpu_is_recommended_accepted_mailed_and_released(
        settings, smtp_server):
    # as `make demo` sets them
    settings.RECLAIM_LOOKBACK_S, settings.RECLAIM_GRACE_S = 3600, 300
    settings.RECLAIM_HISTORY_DAYS = 0
    assert policy().rule == "guarded"  # the product's default
    now = hour_floor(timezone.now()) - timedelta(minutes=20)
    demo_organisation_seed()
    demo_reservations_seed(now=now)
    reservation = demo_reclaim_seed(now=now)
    held = {a.gpu.index: a for a in reservation.assignments.select_related("gpu__node")}
    assert {a.gpu.node.hostname for a in held.values()} == {FAULTY_NODE}
    assert set(held) == {2, 3}  # the simulator's notebook and idle GPUs
    notebook, abandoned = held[2].gpu, held[3].gpu
    demo_history_backfill(hours=2, now=now, hostnames=[FAULTY_NODE])

    recommendations_evaluate(now=now)

    [rec] = Recommendation.objects.filter(reservation=reservation)
    assert rec.kind == "reclaim" and list(rec.gpus.all()) == [abandoned]
    gone = rec.evidence["gpus"][str(abandoned.id)]
    assert (gone["state"], gone["rule"], gone["busy_s"], gone["process_count"]) == (
        "idle", "guarded", 0, 0)
    assert gone["memory_used_bytes_max"] <= 2**30
    # idle by the spec's rule, the open notebook stays: the card says why
    kept = rec.evidence["gpus"][str(notebook.id)]
    assert (kept["state"], kept["guard"], kept["busy_fraction"]) == ("guarded", "held", "0.0000")
    assert kept["memory_used_bytes_max"] >= 20 * 2**30
    recommendation_accept(recommendation=rec, actor=User.objects.get(username="admin"), now=now)
    [notice] = [m for m in smtp_server.to("nlp-lead@example.org")
                if "will be released" in m.message["Subject"]]
    assert abandoned.uuid in notice.text() and "ada-h100-01/3" in notice.text()
    assert notebook.uuid not in notice.text()

    recommendations_release_due(now=now + timedelta(seconds=301))

    rec.refresh_from_db()
    release = now + timedelta(seconds=300)
    assert rec.status == "released" and rec.released_at == release
    later = Period(release, release + timedelta(days=1))
    free = {g.id for g in free_map(gpu_class=abandoned.gpu_class, start=later.start,
                                   end=later.end).gpus_free_over(later.start, later.end)}
    assert abandoned.id in free and notebook.id not in free
    period = Period(reservation.start, reservation.end)
    assert reserved_seconds(period=period, reservation=reservation) == int(
        (release - reservation.start).total_seconds() + period.seconds)


def test_the_spec_rule_would_take_the_open_notebook_too(settings):
    settings.RECLAIM_LOOKBACK_S, settings.RECLAIM_RULE = 3600, "spec"
    now = hour_floor(timezone.now()) - timedelta(minutes=20)
    demo_organisation_seed()
    demo_reservations_seed(now=now)
    reservation = demo_reclaim_seed(now=now)
    demo_history_backfill(hours=2, now=now, hostnames=[FAULTY_NODE])

    recommendations_evaluate(now=now)

    [rec] = Recommendation.objects.filter(reservation=reservation)
    assert sorted(g.index for g in rec.gpus.all()) == [2, 3]
