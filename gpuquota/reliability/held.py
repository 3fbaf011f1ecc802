"""What a drain keeps out (docs/reliability.md#what-a-drain-keeps-out): the drained GPU,
from its failure until the drain ends, is neither assigned to a new reservation nor lent,
whatever its health intervals say (a GPU whose failure needs a replacement may report
good samples after a reboot and still wait for the replacement). Capacity reads this
through the core hook `GPUS_HELD_OUT` (reservations sit below reliability); lending reads
it directly."""

from datetime import datetime, timedelta

from django.db.models import F, Q

from gpuquota.reliability.models import Drain


def drained_spans(*, gpu_ids, start: datetime, end: datetime) -> list[tuple]:
    """(gpu_id, from, until or None) of the drains of `gpu_ids` overlapping [start, end)."""
    return list(Drain.objects.filter(
        Q(released_at__isnull=True) | Q(released_at__gt=start), gpu_id__in=list(gpu_ids),
        event_at__lt=end).exclude(released_at__lte=F("event_at"))
        .values_list("gpu_id", "event_at", "released_at"))


def drained_gpu_ids(*, gpu_ids, at: datetime) -> set[int]:
    """The GPUs among `gpu_ids` that a drain keeps out at `at`."""
    return {gpu_id for gpu_id, _, _ in drained_spans(gpu_ids=gpu_ids, start=at,
                                                      end=at + _SECOND)}


_SECOND = timedelta(seconds=1)
