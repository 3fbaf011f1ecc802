"""RMA records (docs/reliability.md#rma-records): an admin sends a GPU back by its board
serial (the one its agent read, when it reads one); the GPU that later comes back with that
serial under a new UUID, or else takes its slot (the same node and index, a new UUID), is
linked to it, so the slot's history (the GPUs it held, their serials, why each went back)
stays on the GPU's page. Audited."""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q

from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Gpu
from gpuquota.reliability.models import Drain, Rma


@transaction.atomic
def rma_open(*, gpu: Gpu, serial: str, reason: str, by, at: datetime) -> Rma:
    """Record that `gpu` (serial `serial`) is sent back; refused for a MIG device, without a
    serial, or when it has an RMA still waiting for its replacement."""
    if not (by is not None and by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can record an RMA.")
    if gpu.parent_id is not None:
        raise DomainError("A MIG device is not sent back: its GPU is.", field="gpu")
    serial = serial.strip() or gpu.serial
    if not serial:
        raise DomainError("Give the board serial (nvidia-smi -q: Serial Number): its agent "
                          "reports none.", field="serial")
    if gpu.serial and serial != gpu.serial:
        raise DomainError(f"The GPU reports the board serial {gpu.serial}; leave the field "
                          "empty to use it.", field="serial")
    drain = Drain.objects.filter(gpu=gpu).order_by("-event_at").first()
    try:
        with transaction.atomic():
            rma = Rma.objects.create(gpu=gpu, serial=serial[:64], node_id=gpu.node_id,
                                     index=gpu.index, reason=reason.strip()[:200] or "replace",
                                     drain=drain, opened_at=at, opened_by=by)
    except IntegrityError:
        raise DomainError("This GPU's RMA is already open.", field="gpu") from None
    audit_record(actor=by, action="gpu_rma", obj=rma, reason=rma.reason, changes={
        "gpu": gpu.uuid, "serial": rma.serial, "slot": f"{gpu.node.hostname}/{gpu.index}",
        "drain": drain.pk if drain else None})
    return rma


def _replacement(rma: Rma) -> tuple[Gpu | None, str]:
    """The GPU that replaced the one sent back, and how it was known: the same board
    (its serial) back under a new UUID, wherever it is, else the newest physical GPU
    commissioned since in its slot."""
    later = Gpu.objects.filter(parent__isnull=True, commissioned_at__gt=rma.gpu.commissioned_at
                               ).exclude(pk=rma.gpu_id).order_by("-commissioned_at")
    same_board = later.filter(serial=rma.serial).first()
    if same_board is not None:
        return same_board, "serial"
    return later.filter(node_id=rma.node_id, index=rma.index).first(), "slot"


def rmas_link_replacements() -> list[Rma]:
    """Link each open RMA to the GPU that replaced the one sent back (`_replacement`)."""
    linked = []
    for rma in Rma.objects.filter(replacement__isnull=True).select_related("gpu"):
        new, how = _replacement(rma)
        if new is None:
            continue
        rma.replacement, rma.replaced_at = new, new.commissioned_at
        rma.save(update_fields=["replacement", "replaced_at"])
        audit_record(actor=None, action="gpu_rma_replaced", obj=rma, reason=rma.reason,
                     changes={"gpu": rma.gpu.uuid, "replacement": new.uuid, "matched_by": how,
                              "replacement_serial": new.serial})
        linked.append(rma)
    return linked


def slot_rmas(*, gpu: Gpu) -> list[Rma]:
    """The RMAs of the GPU's slot (node and index): the GPUs it held before, and its own;
    and those of its board (its serial) or that it replaced, wherever they were."""
    mine = Q(node_id=gpu.node_id, index=gpu.index) | Q(replacement=gpu) | Q(gpu=gpu)
    if gpu.serial:
        mine |= Q(serial=gpu.serial)
    return list(Rma.objects.filter(mine).select_related("gpu", "replacement", "opened_by"))
