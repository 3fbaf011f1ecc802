"""GPU health from events and samples (accounting.md, Inventory: the health table).

Openers (events, samples with uncorrected ECC errors) open `failed` or `degraded`
intervals; a failed interval closes at the window_start of the first sample with
readings >= 1 after the node reports a new boot_id, or at an admin's recovery
time. Every change marks the GPU-hours it re-attributes dirty. Evaluation is
idempotent: an opener inside an interval at least as bad changes nothing.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.models import AgentBatch, EventType, GpuEvent, Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.usage.services import gpu_usage_mark_dirty

FAILED_XIDS = frozenset({48, 64, 79, 95, 119, 120})
DEGRADED_XIDS = frozenset({63, 74, 92, 94})
FAILED, DEGRADED = GpuHealthInterval.State.FAILED, GpuHealthInterval.State.DEGRADED
_RANK = {DEGRADED: 1, FAILED: 2}
#: Records of one batch are stored with (about) the batch's receipt time.
_RECEIPT_TOLERANCE = timedelta(seconds=5)


@dataclass(frozen=True)
class Opener:
    at: datetime
    state: str
    reason: str
    received_at: datetime


def event_health_state(*, type: str, xid: int | None) -> str | None:
    """The state an event puts a GPU in per the spec's table, or None (no change)."""
    # an `ecc_uncorrected` event is not in the table: the sample's ECC count fails the GPU
    if type == EventType.GPU_LOST:
        return FAILED
    if type == EventType.REMAP_PENDING:
        return DEGRADED
    if type == EventType.XID:
        if xid in FAILED_XIDS:
            return FAILED
        if xid in DEGRADED_XIDS:
            return DEGRADED
    return None


def _openers(device_ids: list[int], start: datetime, end: datetime) -> list[Opener]:
    openers = []
    events = GpuEvent.objects.filter(gpu_id__in=device_ids, ts__gte=start, ts__lt=end)
    for event in events.values("ts", "type", "xid", "received_at"):
        state = event_health_state(type=event["type"], xid=event["xid"])
        if state is not None:
            reason = f"xid {event['xid']}" if event["type"] == EventType.XID else event["type"]
            openers.append(Opener(event["ts"], state, reason, event["received_at"]))
    samples = Sample.objects.filter(
        gpu_id__in=device_ids, window_start__gte=start, window_start__lt=end,
        ecc_uncorrected__gt=0,
    )
    for sample in samples.values("window_start", "ecc_uncorrected", "received_at"):
        reason = f"{sample['ecc_uncorrected']} uncorrected ECC error(s) in a sample"
        openers.append(Opener(sample["window_start"], FAILED, reason, sample["received_at"]))
    return sorted(openers, key=lambda o: (o.at, -_RANK[o.state]))


def _boot_at_receipt(node_id: int, received_at: datetime) -> str:
    """The boot_id of the batch that carried a record (the batch received closest to it)."""
    batches = AgentBatch.objects.filter(node_id=node_id).exclude(boot_id="")
    before = batches.filter(received_at__lte=received_at).order_by("-received_at").first()
    after = batches.filter(received_at__gt=received_at).order_by("received_at").first()
    candidates = [b for b in (before, after) if b is not None]
    if not candidates:
        return ""
    return min(candidates, key=lambda b: abs(b.received_at - received_at)).boot_id


def _health_open(gpu: Gpu, opener: Opener) -> bool:
    intervals = list(GpuHealthInterval.objects.filter(gpu=gpu).order_by("valid_from"))
    covering = next(
        (i for i in intervals
         if i.valid_from <= opener.at and (i.valid_until is None or opener.at < i.valid_until)),
        None,
    )
    if covering is not None and _RANK[covering.state] >= _RANK[opener.state]:
        return False
    boot_id = _boot_at_receipt(gpu.node_id, opener.received_at)
    if covering is not None:  # degraded → failed from this instant
        until = covering.valid_until
        if covering.valid_from == opener.at:
            covering.delete()
        else:
            covering.valid_until = opener.at
            covering.closed_reason = f"became failed: {opener.reason}"
            covering.save(update_fields=["valid_until", "closed_reason"])
    else:
        later = [i.valid_from for i in intervals if i.valid_from > opener.at]
        until = min(later) if later else None
    GpuHealthInterval.objects.create(
        gpu=gpu, state=opener.state, valid_from=opener.at, valid_until=until,
        reason=opener.reason[:256], boot_id=boot_id,
    )
    gpu_usage_mark_dirty(gpu_id=gpu.id, start=opener.at, end=until or timezone.now())
    return True


def _health_auto_close(gpu: Gpu, device_ids: list[int], hour: datetime) -> bool:
    # The open interval, or one an admin closed at a time that a good sample of this hour
    # may precede: the interval ends at the earlier of the two.
    interval = (
        GpuHealthInterval.objects.filter(gpu=gpu, state=FAILED)
        .exclude(boot_id="")
        .filter(Q(valid_until__isnull=True)
                | Q(closed_by__isnull=False, valid_from__lt=hour + timedelta(hours=1),
                    valid_until__gt=hour))
        .order_by("-valid_from")
        .first()
    )
    if interval is None:
        return False
    new_boot = (
        AgentBatch.objects.filter(node_id=gpu.node_id, received_at__gt=interval.valid_from)
        .exclude(Q(boot_id="") | Q(boot_id=interval.boot_id))
        .order_by("received_at")
        .first()
    )
    if new_boot is None:
        return False
    good = Sample.objects.filter(
        gpu_id__in=device_ids, readings__gte=1, window_start__gt=interval.valid_from,
        received_at__gte=new_boot.received_at - _RECEIPT_TOLERANCE,
    )
    old_until = interval.valid_until
    if old_until is not None:
        good = good.filter(window_start__lt=old_until)
    good = good.order_by("window_start").values_list("window_start", flat=True).first()
    if good is None:
        return False
    interval.valid_until = good
    interval.closed_reason = f"new boot {new_boot.boot_id[:36]} and a good sample"
    interval.closed_by = None  # the admin's recovery stays in the audit log
    interval.save(update_fields=["valid_until", "closed_reason", "closed_by"])
    gpu_usage_mark_dirty(gpu_id=gpu.id, start=good, end=old_until or timezone.now())
    return True


@transaction.atomic
def gpu_health_evaluate(*, gpu_id: int, hour: datetime) -> int:
    """Apply the health openers of one GPU-hour (its MIG devices' too) and close an
    open failed interval after a reboot with a good sample; idempotent. Returns changes."""
    gpu = Gpu.objects.get(id=gpu_id)
    if gpu.parent_id is not None:
        gpu = Gpu.objects.get(id=gpu.parent_id)
    device_ids = [gpu.id, *gpu.mig_devices.values_list("id", flat=True)]
    changes = sum(
        _health_open(gpu, opener)
        for opener in _openers(device_ids, hour, hour + timedelta(hours=1))
    )
    return changes + _health_auto_close(gpu, device_ids, hour_floor(hour))


@transaction.atomic
def gpu_health_recover(*, gpu: Gpu, at: datetime, by, note: str) -> GpuHealthInterval:
    """An admin ends the failed or degraded interval in force at `at` (which may lie in
    the past) at `at`; audited; the re-attributed hours are marked dirty."""
    if not (by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can recover a GPU.")
    at = whole_second(at)
    now = timezone.now()
    if at > now:
        raise DomainError("The recovery time cannot be in the future.", field="at")
    interval = (
        GpuHealthInterval.objects.select_for_update()
        .filter(gpu=gpu, valid_from__lte=at)
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at))
        .first()
    )
    if interval is None:
        raise Conflict("The GPU was healthy at that time: nothing to recover.", field="at")
    if interval.valid_from == at:
        raise DomainError("The recovery time must be after the failure began.", field="at")
    old_until = interval.valid_until
    interval.valid_until = at
    interval.closed_reason = (note or "recovered by an admin")[:256]
    interval.closed_by = by
    interval.save(update_fields=["valid_until", "closed_reason", "closed_by"])
    audit_record(
        actor=by, action="gpu_health_recover", obj=interval, reason=note,
        changes={"gpu": gpu.uuid, "state": interval.state,
                 "valid_until": [old_until.isoformat() if old_until else None, at.isoformat()]},
    )
    gpu_usage_mark_dirty(gpu_id=gpu.id, start=at, end=old_until or now)
    return interval
