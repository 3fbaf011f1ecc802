"""What the fleet reliability page shows, as of an instant (one call per page)."""

from datetime import datetime, timedelta

from gpuquota.ingest.taxonomy import XIDS
from gpuquota.reliability.drains import FIXES
from gpuquota.reliability.drift import drift_from
from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.lemons import WINDOW, lemons_from
from gpuquota.reliability.models import Drain
from gpuquota.reliability.selectors import failures_by, figures_from

DAYS = 90


def reliability_page(*, as_of: datetime) -> dict:
    """Figures per class and cluster over the last 90 days, drift flags, the GPU and node
    lemons with their evidence, the GPUs failed now and why, the drained nodes (open, and
    the last ten returned), the taxonomy."""
    history = fleet_history(as_of=as_of, since=as_of - 2 * WINDOW)
    start = as_of - timedelta(days=DAYS)
    failed_now = sorted(
        ((history.gpus[f.gpu_id], f) for f in history.failed
         if f.end is None and f.gpu_id in history.gpus), key=lambda pair: pair[1].start)
    last_incident = {}
    for incident in history.incidents:
        last_incident[incident.gpu_id] = incident
    return {
        "as_of": as_of, "days": DAYS,
        "classes": figures_from(history, group="class", start=start),
        "clusters": figures_from(history, group="cluster", start=start),
        "by": {name: counts.most_common()
               for name, counts in failures_by(history, start=start).items()},
        "drift": drift_from(history),
        "gpu_lemons": lemons_from(history, kind="gpu"),
        "node_lemons": lemons_from(history, kind="node"),
        "failed_now": [{"gpu": gpu, "since": f.start,
                        "incident": last_incident.get(gpu.id)} for gpu, f in failed_now],
        "taxonomy": sorted(XIDS.values(), key=lambda e: e.xid),
        "drains": [{"drain": d, "fixes": sorted(FIXES.get(d.needs, {"admin"}))}
                   for d in Drain.objects.filter(released_at__isnull=True)
                   .select_related("node__cluster", "gpu")],
        "drains_ended": list(Drain.objects.filter(released_at__isnull=False)
                             .select_related("node__cluster", "gpu", "released_by")
                             .order_by("-released_at")[:10]),
    }
