"""GPU health from events and samples (accounting.md, Inventory: the health table).

Openers (events, samples with uncorrected ECC errors) open `failed` or `degraded`
intervals; a failed interval ends at the earlier of an admin's recovery time and the
window_start of the first sample with readings >= 1 after it began, sent under a boot
other than the one it failed under (each sample and event keeps its batch's boot).
Only sample times and boot ids decide: the same data imported in any order, or late
from a spool, converges on the same intervals, an admin's back-dated recovery included
(an end only moves earlier, to a good sample found later or to a recovery; an opener
inside an interval that arrived first is absorbed, and a late opener absorbs the
intervals its own would have covered, with the recovery that ended one; whenever an end
moves, by any path, the openers after it are evaluated again). Every change marks the
GPU-hours it re-attributes dirty, and the hours of the openers it uncovers. Evaluation
is idempotent.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gpuquota.core.contributions import recompute_horizon
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import hour_floor
from gpuquota.ingest.models import EventType, GpuEvent, Sample
from gpuquota.ingest.taxonomy import DEGRADED_XIDS, FAILED_XIDS
from gpuquota.ingest.told import gpu_failed_tell
from gpuquota.inventory.models import Gpu, GpuHealthInterval
from gpuquota.outbox.services import gpu_hours_mark_dirty, gpu_usage_mark_dirty

FAILED, DEGRADED = GpuHealthInterval.State.FAILED, GpuHealthInterval.State.DEGRADED
_RANK = {DEGRADED: 1, FAILED: 2}
ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Opener:
    at: datetime
    state: str
    reason: str
    boot_id: str  # the boot it was sent under ("" when the agent sent none)


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
    for event in events.values("ts", "type", "xid", "boot__boot_id"):
        state = event_health_state(type=event["type"], xid=event["xid"])
        if state is not None:
            reason = f"xid {event['xid']}" if event["type"] == EventType.XID else event["type"]
            openers.append(Opener(event["ts"], state, reason, event["boot__boot_id"] or ""))
    samples = Sample.objects.filter(
        gpu_id__in=device_ids, window_start__gte=start, window_start__lt=end,
        ecc_uncorrected__gt=0,
    )
    for sample in samples.values("window_start", "ecc_uncorrected", "boot__boot_id"):
        reason = f"{sample['ecc_uncorrected']} uncorrected ECC error(s) in a sample"
        openers.append(Opener(sample["window_start"], FAILED, reason,
                              sample["boot__boot_id"] or ""))
    return sorted(openers, key=lambda o: (o.at, -_RANK[o.state], o.reason))


def _boot_in_force(device_ids: list[int], opener: Opener) -> str:
    """The boot a failure happened under: the one its own record was sent under, else
    that of the GPU's last sample starting at or before it. Sample data, never receipts."""
    if opener.boot_id:
        return opener.boot_id
    found = (Sample.objects.filter(gpu_id__in=device_ids, window_start__lte=opener.at,
                                   boot__isnull=False)
             .order_by("-window_start").values_list("boot__boot_id", flat=True).first())
    return found or ""


def _first_good_sample(device_ids: list[int], *, after: datetime, boot_id: str,
                       before: datetime | None, not_before: datetime | None = None):
    """(window_start, boot_id) of the first sample with readings >= 1 starting after
    `after` (and in [not_before, before)) sent under a boot other than `boot_id`."""
    good = (Sample.objects.filter(gpu_id__in=device_ids, readings__gte=1,
                                  window_start__gt=after, boot__isnull=False)
            .exclude(boot__boot_id=boot_id))
    if before is not None:
        good = good.filter(window_start__lt=before)
    if not_before is not None:
        good = good.filter(window_start__gte=not_before)
    return good.order_by("window_start").values_list("window_start", "boot__boot_id").first()


def _closed_reason(boot_id: str) -> str:
    return f"new boot {boot_id[:36]} and a good sample"


def _later(interval_until: datetime | None, *others: datetime | None) -> datetime | None:
    """The latest of some ends, None (open) winning."""
    ends = [interval_until, *others]
    return None if any(e is None for e in ends) else max(ends)


def _device_ids(gpu: Gpu) -> list[int]:
    return [gpu.id, *gpu.mig_devices.values_list("id", flat=True)]


def _reevaluate_marks(gpu: Gpu, device_ids: list[int], start: datetime,
                      end: datetime | None) -> None:
    """Mark what a change of [start, end) re-attributes, and the hours of the openers there
    (they may open intervals of their own now), so the sweep evaluates them again."""
    until = end or timezone.now()
    gpu_usage_mark_dirty(gpu_id=gpu.id, start=start, end=until)
    event_hours = GpuEvent.objects.filter(gpu_id__in=device_ids, ts__gte=start, ts__lt=until)
    gpu_hours_mark_dirty(marks=[(gpu.id, ts) for ts in event_hours.values_list("ts", flat=True)])


@dataclass(frozen=True)
class End:
    at: datetime | None  # None: open
    reason: str = ""
    by: object = None  # the admin whose recovery (or record) ends it


def _health_open(gpu: Gpu, device_ids: list[int], opener: Opener) -> bool:
    intervals = list(GpuHealthInterval.objects.filter(gpu=gpu).order_by("valid_from"))
    covering = next(
        (i for i in intervals
         if i.valid_from <= opener.at and (i.valid_until is None or opener.at < i.valid_until)),
        None,
    )
    if covering is not None and _RANK[covering.state] >= _RANK[opener.state]:
        return False
    boot_id = _boot_in_force(device_ids, opener)
    if covering is not None:  # degraded → failed from this instant, until what ended it
        end = (End(covering.valid_until, covering.closed_reason, covering.closed_by)
               if covering.closed_by_id is not None else End(covering.valid_until))
        if covering.valid_from == opener.at:
            covering.delete()
        else:
            covering.valid_until = opener.at
            covering.closed_reason = f"became failed: {opener.reason}"
            covering.closed_by = None
            covering.save(update_fields=["valid_until", "closed_reason", "closed_by"])
    else:
        later = [i.valid_from for i in intervals if i.valid_from > opener.at]
        end = End(min(later) if later else None)
    end, marked_until = _new_end(gpu, device_ids, opener, boot_id, end)
    GpuHealthInterval.objects.create(
        gpu=gpu, state=opener.state, valid_from=opener.at, valid_until=end.at,
        reason=opener.reason[:256], boot_id=boot_id, closed_reason=end.reason[:256],
        closed_by=end.by,
    )
    if opener.state == FAILED:
        gpu_failed_tell(gpu=gpu, at=opener.at, reason=opener.reason, until=end.at)
    _reevaluate_marks(gpu, device_ids, opener.at, marked_until)
    return True


def _new_end(gpu: Gpu, device_ids: list[int], opener: Opener, boot_id: str,
             end: End) -> tuple[End, datetime | None]:
    """Where a new interval ends, as if the data had come in order. A failed one ends at
    the first good sample of another boot. The intervals that follow it up to there (for
    a degraded one, the degraded ones) are absorbed: their openers lie inside it; an
    admin's recovery that ended one ends it. Otherwise it ends where a failed interval
    begins: it became failed. Returns (the end, the latest end of what changed)."""
    marked_until = end.at
    while True:
        if opener.state == FAILED and boot_id:
            good = _first_good_sample(device_ids, after=opener.at, boot_id=boot_id,
                                      before=end.at)
            if good is not None:
                return End(good[0], _closed_reason(good[1])), marked_until
        if end.by is not None or end.at is None:
            return end, marked_until
        following = GpuHealthInterval.objects.filter(gpu=gpu, valid_from=end.at).first()
        if following is None:
            return end, marked_until
        if _RANK[following.state] > _RANK[opener.state]:
            return End(end.at, f"became failed: {following.reason}"), marked_until
        marked_until = _later(marked_until, following.valid_until)
        if following.closed_by_id is not None:
            end = End(following.valid_until, following.closed_reason, following.closed_by)
        else:
            end = End(GpuHealthInterval.objects.filter(gpu=gpu, valid_from__gt=end.at)
                      .order_by("valid_from").values_list("valid_from", flat=True).first())
        following.delete()


def _health_auto_close(gpu: Gpu, device_ids: list[int], hour: datetime) -> bool:
    """End failed intervals overlapping the hour at a good sample of this hour sent under
    another boot than theirs, when it is earlier than their end (the admin's recovery
    included): evaluated for every hour with data, the end is the first such sample."""
    end = hour + timedelta(hours=1)
    intervals = (
        GpuHealthInterval.objects.filter(gpu=gpu, state=FAILED, valid_from__lt=end)
        .exclude(boot_id="")
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=hour))
        .order_by("valid_from")
    )
    changed = False
    for interval in intervals:
        old_until = interval.valid_until
        good = _first_good_sample(
            device_ids, after=interval.valid_from, boot_id=interval.boot_id,
            before=end if old_until is None else min(end, old_until), not_before=hour)
        if good is None:
            continue
        interval.valid_until = good[0]
        interval.closed_reason = _closed_reason(good[1])
        interval.closed_by = None  # the admin's recovery stays in the audit log
        interval.save(update_fields=["valid_until", "closed_reason", "closed_by"])
        _reevaluate_marks(gpu, device_ids, good[0], old_until)
        changed = True
    return changed


def gpus_with_health_work(*, gpu_ids: list[int], hour: datetime) -> set[int]:
    """Of these physical GPUs, the ones `gpu_health_evaluate` may change for this hour:
    an opener in it (an event of the table or a sample with uncorrected ECC errors, on
    the GPU or its MIG devices) or a failed interval with a boot id overlapping it. Three
    queries for any number of GPUs; the others need no health evaluation."""
    end = hour + timedelta(hours=1)
    parent_of = dict(Gpu.objects.filter(Q(id__in=gpu_ids) | Q(parent_id__in=gpu_ids))
                     .values_list("id", "parent_id"))
    device_ids = list(parent_of)
    opener_events = (Q(type__in=[EventType.GPU_LOST, EventType.REMAP_PENDING])
                     | Q(type=EventType.XID, xid__in=FAILED_XIDS | DEGRADED_XIDS))
    events = GpuEvent.objects.filter(opener_events, gpu_id__in=device_ids, ts__gte=hour,
                                     ts__lt=end).values_list("gpu_id", flat=True).distinct()
    ecc = Sample.objects.filter(gpu_id__in=device_ids, window_start__gte=hour,
                                window_start__lt=end, ecc_uncorrected__gt=0
                                ).values_list("gpu_id", flat=True).distinct()
    failed = (GpuHealthInterval.objects.filter(gpu_id__in=gpu_ids, state=FAILED,
                                               valid_from__lt=end)
              .exclude(boot_id="").filter(Q(valid_until__isnull=True) | Q(valid_until__gt=hour))
              .values_list("gpu_id", flat=True).distinct())
    devices = {*events, *ecc}
    return {parent_of.get(d) or d for d in devices} | set(failed)


@transaction.atomic
def gpu_health_evaluate(*, gpu_id: int, hour: datetime) -> int:
    """Apply the health openers of one GPU-hour (its MIG devices' too) and close an
    open failed interval after a reboot with a good sample; idempotent. Returns changes."""
    gpu = Gpu.objects.get(id=gpu_id)
    if gpu.parent_id is not None:
        gpu = Gpu.objects.get(id=gpu.parent_id)
    device_ids = _device_ids(gpu)
    changes = sum(
        _health_open(gpu, device_ids, opener)
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
    _reevaluate_marks(gpu, _device_ids(gpu), at, old_until)
    return interval


def _fmt(value: datetime | None) -> str:
    return "open end" if value is None else f"{value:%Y-%m-%d %H:%M:%S}Z"


@transaction.atomic
def gpu_health_interval_record(*, gpu: Gpu, state: str, valid_from: datetime,
                               valid_until: datetime | None, by,
                               reason: str) -> GpuHealthInterval:
    """An admin records that a GPU was failed or degraded over [valid_from, valid_until)
    (open: until recovered, or for `failed` until a good sample of another boot, the
    earlier of the two as for any failure); never overlapping another interval; audited;
    the hours it re-attributes marked for recompute."""
    if not (by is not None and by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can record a GPU's health.")
    if gpu.parent_id is not None:
        raise DomainError("Record the physical GPU's health; MIG devices follow it.",
                          field="gpu")
    if state not in (FAILED, DEGRADED):
        raise DomainError("The state must be failed or degraded.", field="state")
    now = timezone.now()
    valid_from = whole_second(valid_from)
    valid_until = whole_second(valid_until) if valid_until is not None else None
    if valid_from > now or (valid_until is not None and valid_until > now):
        raise DomainError("A health interval cannot lie in the future.", field="valid_from")
    if valid_until is not None and valid_until <= valid_from:
        raise DomainError("The interval must end after it starts.", field="valid_until")
    horizon = recompute_horizon(start=valid_from, gpu_id=gpu.pk)
    if horizon is not None:
        raise Conflict(f"Raw samples before {_fmt(horizon)} have expired: the GPU-hours from "
                       f"{_fmt(hour_floor(valid_from))} could not be recomputed.",
                       field="valid_from")
    overlapping = (GpuHealthInterval.objects.select_for_update().filter(gpu=gpu)
                   .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=valid_from)))
    if valid_until is not None:
        overlapping = overlapping.filter(valid_from__lt=valid_until)
    if (other := overlapping.order_by("valid_from").first()) is not None:
        raise Conflict(f"Overlaps the {other.state} interval from {_fmt(other.valid_from)} to "
                       f"{_fmt(other.valid_until)} ({other.reason}).", field="valid_from")
    device_ids = _device_ids(gpu)
    boot_id, closed_reason, until = "", "", valid_until
    if state == FAILED:
        boot_id = _boot_in_force(device_ids, Opener(valid_from, state, reason, ""))
        good = boot_id and _first_good_sample(device_ids, after=valid_from, boot_id=boot_id,
                                              before=valid_until)
        if good:
            until, closed_reason = good[0], _closed_reason(good[1])
    interval = GpuHealthInterval.objects.create(
        gpu=gpu, state=state, valid_from=valid_from, valid_until=until,
        reason=(reason or "recorded by an admin")[:256], boot_id=boot_id,
        closed_reason=closed_reason or ("recorded by an admin" if until else ""),
        closed_by=by if until is not None and not closed_reason else None,
    )
    audit_record(actor=by, action="gpu_health_record", obj=interval, reason=reason, changes={
        "gpu": gpu.uuid, "state": state, "valid_from": valid_from.isoformat(),
        "valid_until": until.isoformat() if until else None})
    _reevaluate_marks(gpu, device_ids, valid_from, until)
    return interval
