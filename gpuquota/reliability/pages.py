"""What the fleet reliability page shows: the figures of the latest snapshot (the
`reliability.figures` task's), and what is true now read live, a page's worth each (the
GPUs failed now, the drained nodes). A fixed number of queries whatever the fleet."""

from datetime import datetime

from django.db.models import Q

from gpuquota.ingest.taxonomy import XIDS
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.reliability.drains import FIXES
from gpuquota.reliability.history import INCIDENT_GAP, GpuLife, gpus_incidents
from gpuquota.reliability.models import Drain
from gpuquota.reliability.snapshot import FIGURES_INTERVAL_S, reliability_figures_latest

#: The failed GPUs and open drains listed (the oldest first, then a count of the rest).
SHOWN = 50


def failed_now(*, now: datetime, limit: int = SHOWN) -> tuple[list[dict], int]:
    """The physical GPUs failed at `now` (the `limit` failed longest) with their latest
    hardware incident, and how many are failed in all."""
    failed = GpuHealthInterval.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=now), state="failed",
        valid_from__lte=now, gpu__parent__isnull=True)
    rows = list(failed.select_related("gpu__node__cluster", "gpu__gpu_class")
                .order_by("valid_from", "gpu_id")[:limit])
    if not rows:
        return [], 0
    gpus = {r.gpu_id: GpuLife(r.gpu_id, r.gpu.uuid, r.gpu.node_id, r.gpu.node.hostname,
                              r.gpu.node.cluster.slug, r.gpu.gpu_class.name,
                              r.gpu.commissioned_at, r.gpu.retired_at) for r in rows}
    last = {i.gpu_id: i for i in gpus_incidents(
        gpus=gpus, since=min(r.valid_from for r in rows) - INCIDENT_GAP, as_of=now)}
    shown = [{"gpu": gpus[r.gpu_id], "since": r.valid_from, "incident": last.get(r.gpu_id)}
             for r in rows]
    return shown, (len(rows) if len(rows) < limit else failed.count())


def reliability_page(*, now: datetime) -> dict:
    """Figures per class and cluster over the last 90 days, drift flags, the GPU and node
    lemons with their evidence (as of the latest snapshot); the GPUs failed now and why,
    the drained nodes (open, and the last ten returned), the taxonomy."""
    snapshot = reliability_figures_latest(now=now)
    failed, failed_count = failed_now(now=now)
    drains = Drain.objects.filter(released_at__isnull=True)
    shown_drains = list(drains.select_related("node__cluster", "gpu")[:SHOWN])
    return {
        "snapshot": snapshot, "as_of": snapshot.as_of, "days": snapshot.days,
        "interval_min": FIGURES_INTERVAL_S // 60,
        "classes": snapshot.classes, "clusters": snapshot.clusters, "by": snapshot.by,
        "drift": snapshot.drift, "gpu_lemons": snapshot.gpu_lemons,
        "node_lemons": snapshot.node_lemons,
        "failed_now": failed, "failed_count": failed_count,
        "taxonomy": sorted(XIDS.values(), key=lambda e: e.xid),
        "drains": [{"drain": d, "fixes": sorted(FIXES.get(d.needs, {"admin"}))}
                   for d in shown_drains],
        "drains_count": (len(shown_drains) if len(shown_drains) < SHOWN
                         else drains.count()),
        "drains_ended": list(Drain.objects.filter(released_at__isnull=False)
                             .select_related("node__cluster", "gpu", "released_by")
                             .order_by("-released_at")[:10]),
    }
