"""Admins change a GPU's history (its class or node from an instant, which may lie in
the past) only here: audited, and the GPU-hours they re-attribute marked for recompute
(accounting.md: Inventory). Agents' own moves go through `services.gpu_move`."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gpuquota.core.contributions import recompute_horizon
from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import Gpu, GpuClass, GpuClassInterval, GpuNodeInterval, Node
from gpuquota.inventory.services import gpu_move, gpu_reclassify


def _fmt(value: datetime) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}Z"


def _admin_only(by) -> None:
    if by is None or not (by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can change a GPU's history.")


def history_change_check(*, gpu: Gpu, at: datetime, current_from: datetime) -> None:
    """Refuse a change of a GPU's history at `at`: in the future, before the interval in
    force began, or reaching hours whose raw samples have expired (their rollups could
    not be recomputed: the apps above say so through `RECOMPUTE_HORIZON`)."""
    if at > timezone.now():
        raise DomainError("The change cannot take effect in the future.", field="at")
    if at <= current_from:
        raise DomainError(
            f"The change must take effect after the current interval began "
            f"({_fmt(current_from)}).", field="at")
    horizon = recompute_horizon(start=at, gpu_id=gpu.pk)
    if horizon is not None:
        raise DomainError(
            f"Raw samples before {_fmt(horizon)} have expired: the GPU-hours from "
            f"{_fmt(hour_floor(at))} could not be recomputed. Choose an instant at or after "
            f"{_fmt(horizon)}.", field="at")


def _physical(gpu: Gpu) -> Gpu:
    if gpu.parent_id is not None:
        raise DomainError("Change the physical GPU; its MIG devices follow it.", field="gpu")
    return gpu


@transaction.atomic
def gpu_class_change(*, gpu: Gpu, gpu_class: GpuClass, at: datetime, by,
                     reason: str = "") -> Gpu:
    """An admin prices a GPU (and its MIG devices) as another class from `at`; seconds
    before stay in the old class; audited; the hours from `at` marked for recompute."""
    from gpuquota.outbox.services import gpu_usage_mark_dirty

    _admin_only(by)
    gpu = _physical(Gpu.objects.select_for_update().get(pk=gpu.pk))
    at = whole_second(at)
    if gpu.gpu_class_id == gpu_class.id:
        raise DomainError(f"The GPU is already of class {gpu_class.name}.", field="gpu_class")
    current = GpuClassInterval.objects.filter(gpu=gpu, valid_until__isnull=True).first()
    history_change_check(gpu=gpu, at=at, current_from=current.valid_from if current
                         else gpu.commissioned_at)
    old = gpu.gpu_class.name
    gpu_reclassify(gpu=gpu, gpu_class=gpu_class, at=at)
    gpu.mig_devices.update(gpu_class=gpu_class)
    marked = gpu_usage_mark_dirty(gpu_id=gpu.id, start=at, end=timezone.now())
    audit_record(actor=by, action="gpu.class_change", obj=gpu, reason=reason, changes={
        "gpu": gpu.uuid, "gpu_class": [old, gpu_class.name], "at": at.isoformat(),
        "gpu_hours_marked": marked})
    return gpu


@transaction.atomic
def gpu_node_change(*, gpu: Gpu, node: Node, at: datetime, by, reason: str = "") -> Gpu:
    """An admin records that a GPU (and its MIG devices) moved to another node at `at`
    (its cluster decides whose identities own its unreserved processes); audited; the
    hours from `at` marked for recompute."""
    from gpuquota.outbox.services import gpu_usage_mark_dirty

    _admin_only(by)
    gpu = _physical(Gpu.objects.select_for_update().get(pk=gpu.pk))
    at = whole_second(at)
    if gpu.node_id == node.id:
        raise DomainError(f"The GPU is already on {node}.", field="node")
    current = GpuNodeInterval.objects.filter(gpu=gpu, valid_until__isnull=True).first()
    history_change_check(gpu=gpu, at=at, current_from=current.valid_from if current
                         else gpu.commissioned_at)
    old = str(gpu.node)
    gpu_move(gpu=gpu, node=node, at=at)
    marked = gpu_usage_mark_dirty(gpu_id=gpu.id, start=at, end=timezone.now())
    audit_record(actor=by, action="gpu.node_change", obj=gpu, reason=reason, changes={
        "gpu": gpu.uuid, "node": [old, str(node)], "at": at.isoformat(),
        "gpu_hours_marked": marked})
    return gpu


@transaction.atomic
def gpu_service_change(*, gpu: Gpu, commissioned_at: datetime, retired_at: datetime | None,
                       by, reason: str = "") -> Gpu:
    """An admin corrects when a GPU entered or left service (fleet and capacity figures
    read it; rollups do not, so nothing is recomputed); audited."""
    _admin_only(by)
    gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
    commissioned_at = whole_second(commissioned_at)
    retired_at = whole_second(retired_at) if retired_at is not None else None
    if retired_at is not None and retired_at <= commissioned_at:
        raise DomainError("A GPU must retire after it was commissioned.", field="retired_at")
    before = (gpu.commissioned_at, gpu.retired_at)
    if before == (commissioned_at, retired_at):
        return gpu
    gpu.commissioned_at, gpu.retired_at = commissioned_at, retired_at
    gpu.save(update_fields=["commissioned_at", "retired_at"])
    audit_record(actor=by, action="gpu.service_change", obj=gpu, reason=reason, changes={
        "gpu": gpu.uuid,
        "commissioned_at": [before[0].isoformat(), commissioned_at.isoformat()],
        "retired_at": [before[1].isoformat() if before[1] else None,
                       retired_at.isoformat() if retired_at else None]})
    return gpu
