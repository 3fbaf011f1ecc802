"""Reliability on a GPU's page and a node's page (sections of usage's pages): the unit's
figures over 90 days beside its class's, whether it is a lemon and why, its latest
hardware incidents and its drains. Reads the history of the unit's classes only (the
lemon test compares a unit with its class), not the fleet's."""

from datetime import datetime, timedelta

from gpuquota.inventory.models import Gpu, Node
from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.lemons import WINDOW, lemons_from
from gpuquota.reliability.models import Drain
from gpuquota.reliability.rma import slot_rmas
from gpuquota.reliability.selectors import figures_from
from gpuquota.reliability.snapshot import DAYS

INCIDENTS_SHOWN = 10
DRAINS_SHOWN = 10


def _unit(*, kind: str, key: str, class_ids: set[int], gpu_ids: set[int], drains,
          now: datetime) -> dict:
    as_of = now.replace(microsecond=0)
    history = fleet_history(as_of=as_of, since=as_of - 2 * WINDOW, gpu_class_ids=class_ids)
    start = as_of - timedelta(days=DAYS)
    own = [f.as_dict() for f in figures_from(history, group=kind, start=start) if f.key == key]
    classes = {history.gpus[g].gpu_class for g in gpu_ids if g in history.gpus}
    peers = [f.as_dict() for f in figures_from(history, group="class", start=start)
             if f.key in classes]
    incidents = [i for i in history.incidents if i.gpu_id in gpu_ids][-INCIDENTS_SHOWN:]
    return {
        "rel_kind": kind, "rel_days": DAYS, "rel_rows": own + peers,
        "rel_flag": next((f for f in lemons_from(history, kind=kind) if f.key == key), None),
        "rel_incidents": [{"incident": i, "gpu": history.gpus[i.gpu_id]}
                          for i in reversed(incidents)],
        "rel_drains": list(drains.select_related("node__cluster", "gpu", "released_by")
                           [:DRAINS_SHOWN]),
    }


def gpu_reliability(*, gpu: Gpu, now: datetime) -> dict | None:
    """The section of a physical GPU's page (a MIG device's failures are its parent's)."""
    if gpu.parent_id is not None:
        return None
    return {**_unit(kind="gpu", key=gpu.uuid, class_ids={gpu.gpu_class_id}, gpu_ids={gpu.id},
                    drains=Drain.objects.filter(gpu=gpu), now=now),
            "rel_gpu": gpu, "rel_rmas": slot_rmas(gpu=gpu)}


def node_reliability(*, node: Node, now: datetime) -> dict:
    """The section of a node's page: its GPUs' failures (those within 10 minutes of each
    other one, for the lemon test), against their classes."""
    gpus = list(Gpu.objects.filter(node=node, parent__isnull=True)
                .values_list("id", "gpu_class_id"))
    return _unit(kind="node", key=f"{node.cluster.slug}/{node.hostname}",
                 class_ids={c for _, c in gpus}, gpu_ids={g for g, _ in gpus},
                 drains=Drain.objects.filter(node=node), now=now)
