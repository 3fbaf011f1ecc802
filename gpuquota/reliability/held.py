"""What a drain keeps out (docs/reliability.md#what-a-drain-keeps-out): from its failure
until the drain ends, the drained GPU is neither assigned to a new reservation nor lent,
whatever its health intervals say (a GPU whose failure needs a replacement may report
good samples after a reboot and still wait for the replacement). A drain written to the
scheduler for the node (Slurm's `State=DRAIN`, Kubernetes' cordon) keeps the whole node from
new work, so it holds out every GPU of the node; a drain of the GPU alone (a Kubernetes DRA
DeviceTaintRule) or only recorded (no backend writes for the cluster) holds out its own GPU.
Capacity reads this through the core hook `GPUS_HELD_OUT`
(reservations sit below reliability); lending reads it directly."""

from datetime import datetime, timedelta

from django.db.models import F, Q

from gpuquota.inventory.models import Gpu
from gpuquota.reliability.models import HOLDING_STATES, Drain


def drained_spans(*, gpu_ids, start: datetime, end: datetime,
                  node_wide: bool = True) -> list[tuple]:
    """(gpu_id, from, until or None) of the drains holding `gpu_ids` out over [start, end):
    their own drains and, with `node_wide`, their nodes' drains written to the scheduler for
    the whole node.
    One query."""
    ids = list(gpu_ids)
    own = (Drain.objects.filter(Q(released_at__isnull=True) | Q(released_at__gt=start),
                                gpu_id__in=ids, event_at__lt=end)
           .exclude(released_at__lte=F("event_at"))
           .order_by().values_list("gpu_id", "event_at", "released_at"))
    if not node_wide:
        return list(own)
    node = (Gpu.objects.filter(Q(node__drains__released_at__isnull=True)
                               | Q(node__drains__released_at__gt=start), id__in=ids,
                               node__drains__state__in=HOLDING_STATES,
                               node__drains__scope=Drain.Scope.NODE,
                               node__drains__event_at__lt=end)
            .order_by()  # SQLite refuses an ORDER BY inside a UNION's parts
            .values_list("id", "node__drains__event_at", "node__drains__released_at"))
    return [(gpu_id, since, until) for gpu_id, since, until in own.union(node)
            if until is None or until > since]


def drained_gpu_ids(*, gpu_ids, at: datetime) -> set[int]:
    """The GPUs among `gpu_ids` that a drain keeps out at `at`."""
    return {gpu_id for gpu_id, _, _ in drained_spans(gpu_ids=gpu_ids, start=at,
                                                      end=at + _SECOND)}


_SECOND = timedelta(seconds=1)


def gpus_drained_alone(*, cluster_id: int) -> list[tuple[str, int, str, bool]]:
    """(hostname, index, reason, at once) of the cluster's GPUs drained alone on the
    scheduler now, or being drained (core's GPUS_DRAINED: the backends keep their objects in
    the plan; a pending drain's rule too, so a reconcile while it is written keeps it)."""
    return [(hostname, index, reason, not after_jobs) for hostname, index, reason, after_jobs in
            Drain.objects.filter(released_at__isnull=True, state__in=HOLDING_STATES,
                                 scope=Drain.Scope.GPU, node__cluster_id=cluster_id)
            .order_by("node__hostname", "gpu__index")
            .values_list("node__hostname", "gpu__index", "reason", "after_jobs")]
