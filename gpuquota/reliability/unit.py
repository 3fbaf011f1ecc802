"""Reliability on a GPU's page and a node's page (sections of usage's pages): the unit's
figures over 90 days beside its class's and whether it is a lemon and why (from the latest
figures snapshot, `gpuquota.reliability.snapshot`), its latest hardware incidents and its
drains (read now, for the unit's GPUs only). A fixed number of queries whatever the fleet."""

from datetime import datetime

from gpuquota.inventory.models import Gpu, Node
from gpuquota.reliability.history import GpuLife, gpus_incidents
from gpuquota.reliability.lemons import WINDOW
from gpuquota.reliability.models import Drain
from gpuquota.reliability.rma import slot_rmas
from gpuquota.reliability.snapshot import reliability_figures_latest, snapshot_figures_of

INCIDENTS_SHOWN = 10
DRAINS_SHOWN = 10


def _life(gpu: Gpu) -> GpuLife:
    return GpuLife(gpu.id, gpu.uuid, gpu.node_id, gpu.node.hostname, gpu.node.cluster.slug,
                   gpu.gpu_class.name, gpu.commissioned_at, gpu.retired_at)


def _unit(*, kind: str, key: str, gpus: list[Gpu], drains, now: datetime) -> dict:
    as_of = now.replace(microsecond=0)
    snapshot = reliability_figures_latest(now=as_of)
    classes = {gpu.gpu_class.name for gpu in gpus}
    lives = {gpu.id: _life(gpu) for gpu in gpus}
    incidents = gpus_incidents(gpus=lives, since=as_of - 2 * WINDOW, as_of=as_of) if lives else []
    flags = snapshot.gpu_lemons if kind == "gpu" else snapshot.node_lemons
    return {
        "rel_kind": kind, "rel_days": snapshot.days, "rel_as_of": snapshot.as_of,
        "rel_rows": snapshot_figures_of(snapshot=snapshot, kind=kind, key=key)
        + [f for f in snapshot.classes if f["key"] in classes],
        "rel_flag": next((f for f in flags if f["key"] == key), None),
        "rel_incidents": [{"incident": i, "gpu": lives[i.gpu_id]}
                          for i in reversed(incidents[-INCIDENTS_SHOWN:])],
        "rel_drains": list(drains.select_related("node__cluster", "gpu", "released_by")
                           [:DRAINS_SHOWN]),
    }


def gpu_reliability(*, gpu: Gpu, now: datetime) -> dict | None:
    """The section of a physical GPU's page (a MIG device's failures are its parent's)."""
    if gpu.parent_id is not None:
        return None
    gpu = Gpu.objects.select_related("node__cluster", "gpu_class").get(pk=gpu.pk)
    return {**_unit(kind="gpu", key=gpu.uuid, gpus=[gpu], drains=Drain.objects.filter(gpu=gpu),
                    now=now),
            "rel_gpu": gpu, "rel_rmas": slot_rmas(gpu=gpu)}


def node_reliability(*, node: Node, now: datetime) -> dict:
    """The section of a node's page: its GPUs' failures (those within 10 minutes of each
    other one, for the lemon test), against their classes."""
    gpus = list(Gpu.objects.filter(node=node, parent__isnull=True)
                .select_related("node__cluster", "gpu_class"))
    return _unit(kind="node", key=f"{node.cluster.slug}/{node.hostname}", gpus=gpus,
                 drains=Drain.objects.filter(node=node), now=now)
