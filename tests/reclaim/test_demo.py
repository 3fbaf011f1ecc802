"""The demo's promise (issue 10, "Done means"): with the demo's shortened look-back, the
simulated idle notebook GPU becomes a recommendation; an admin accepts it; the lead's
mail holds the notice; after the shortened grace the GPU is free again and the
reservation's reserved seconds stop at the reclaim instant."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import User
from gpuquota.core.demo import FAULTY_NODE, demo_organisation_seed
from gpuquota.core.demo_history import demo_history_backfill
from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.reservations.capacity import free_map
from gpuquota.reservations.demo import demo_reservations_seed
from gpuquota.usage.seconds import reserved_seconds
from reclaim.demo import demo_reclaim_seed
from reclaim.lifecycle import recommendation_accept, recommendations_release_due
from reclaim.models import Recommendation
from reclaim.services import recommendations_evaluate

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_demo_notebook_is_recommended_accepted_mailed_and_released(
        settings, smtp_server):
    settings.RECLAIM_LOOKBACK_S, settings.RECLAIM_GRACE_S = 3600, 300  # as `make demo` sets
    now = hour_floor(timezone.now()) - timedelta(minutes=20)
    demo_organisation_seed()
    demo_reservations_seed(now=now)
    notebook = demo_reclaim_seed(now=now)
    [held] = notebook.assignments.select_related("gpu__node")
    assert (held.gpu.node.hostname, held.gpu.index) == (FAULTY_NODE, 2)  # the notebook
    demo_history_backfill(hours=2, now=now, hostnames=[FAULTY_NODE])

    recommendations_evaluate(now=now)

    rec = Recommendation.objects.get(reservation=notebook)
    assert rec.kind == "reclaim" and list(rec.gpus.all()) == [held.gpu]
    ev = rec.evidence["gpus"][str(held.gpu_id)]
    assert ev["busy_fraction"] == "0.0000" and ev["memory_used_bytes_max"] >= 20 * 2**30
    recommendation_accept(recommendation=rec, actor=User.objects.get(username="admin"), now=now)
    [notice] = [m for m in smtp_server.to("nlp-lead@example.org")
                if "will be released" in m.message["Subject"]]
    assert held.gpu.uuid in notice.text() and "ada-h100-01/2" in notice.text()

    recommendations_release_due(now=now + timedelta(seconds=301))

    rec.refresh_from_db()
    release = now + timedelta(seconds=300)
    assert rec.status == "released" and rec.released_at == release
    free = free_map(gpu_class=held.gpu.gpu_class, start=release, end=release + timedelta(days=1))
    assert held.gpu_id in {g.id for g in free.gpus_free_over(release, release + timedelta(days=1))}
    period = Period(notebook.start, notebook.end)
    assert reserved_seconds(period=period, reservation=notebook) == int(
        (release - notebook.start).total_seconds())
