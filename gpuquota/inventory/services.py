from datetime import datetime

from django.db import transaction

from gpuquota.core.fields import whole_second
from gpuquota.inventory.models import (
    Gpu,
    GpuClass,
    GpuClassInterval,
    GpuModelMapping,
    GpuNodeInterval,
    Node,
    board_text_normalize,
    gpu_uuid_normalize,
)


def gpu_class_for_model(*, model_name: str) -> GpuClass:
    """The class mapped from an NVML model name; unmapped models get a class named
    after the model until an admin maps it."""
    mapping = GpuModelMapping.objects.select_related("gpu_class").filter(model_name=model_name)
    if (found := mapping.first()) is not None:
        return found.gpu_class
    gpu_class, _ = GpuClass.objects.get_or_create(
        name=(model_name or "unknown")[:64], defaults={"description": "Unmapped NVML model"}
    )
    return gpu_class


@transaction.atomic
def gpu_register(
    *,
    node: Node,
    uuid: str,
    model_name: str,
    at: datetime,
    parent: Gpu | None = None,
    index: int | None = None,
    pci_bus_id: str = "",
    memory_total_bytes: int | None = None,
    power_limit_w: float | None = None,
    gpu_class: GpuClass | None = None,
    serial: str = "",
    board_part_number: str = "",
) -> Gpu:
    """A new GPU on `node` from `at`, with its first node and class intervals; its class
    is its parent's, else `gpu_class` (a caller registering many GPUs of one model looks
    it up once, `gpu_class_for_model`), else its model's."""
    at = whole_second(at)
    if parent is not None:
        gpu_class = parent.gpu_class
    elif gpu_class is None:
        gpu_class = gpu_class_for_model(model_name=model_name)
    gpu = Gpu.objects.create(
        uuid=gpu_uuid_normalize(uuid),
        parent=parent,
        node=node,
        gpu_class=gpu_class,
        model_name=model_name,
        index=index,
        pci_bus_id=pci_bus_id,
        memory_total_bytes=memory_total_bytes,
        power_limit_w=power_limit_w,
        serial=board_text_normalize(serial),
        board_part_number=board_text_normalize(board_part_number),
        commissioned_at=at,
    )
    GpuNodeInterval.objects.create(gpu=gpu, node=node, valid_from=at)
    GpuClassInterval.objects.create(gpu=gpu, gpu_class=gpu_class, valid_from=at)
    return gpu


@transaction.atomic
def gpus_register(*, new: list[dict]) -> list[Gpu]:
    """Many new GPUs (each a dict of `gpu_register`'s arguments, `gpu_class` given and
    `parent` already registered), each with its first node and class intervals as
    `gpu_register` makes them, in three inserts whatever their number; IntegrityError
    when one of them is registered already (nothing is then kept)."""
    gpus = Gpu.objects.bulk_create([Gpu(
        uuid=gpu_uuid_normalize(entry["uuid"]), parent=entry.get("parent"), node=entry["node"],
        gpu_class=entry["parent"].gpu_class if entry.get("parent") else entry["gpu_class"],
        model_name=entry["model_name"], index=entry.get("index"),
        pci_bus_id=entry.get("pci_bus_id", ""),
        memory_total_bytes=entry.get("memory_total_bytes"),
        power_limit_w=entry.get("power_limit_w"),
        serial=board_text_normalize(entry.get("serial")),
        board_part_number=board_text_normalize(entry.get("board_part_number")),
        commissioned_at=whole_second(entry["at"]))
        for entry in new])
    GpuNodeInterval.objects.bulk_create([
        GpuNodeInterval(gpu=gpu, node=gpu.node, valid_from=gpu.commissioned_at) for gpu in gpus])
    GpuClassInterval.objects.bulk_create([
        GpuClassInterval(gpu=gpu, gpu_class=gpu.gpu_class, valid_from=gpu.commissioned_at)
        for gpu in gpus])
    return gpus


@transaction.atomic
def gpu_move(*, gpu: Gpu, node: Node, at: datetime) -> Gpu:
    """Move a GPU (and its MIG devices) to another node from `at`, closing the
    current node interval."""
    at = whole_second(at)
    for device in [gpu, *gpu.mig_devices.all()]:
        GpuNodeInterval.objects.filter(gpu=device, valid_until__isnull=True).update(valid_until=at)
        GpuNodeInterval.objects.create(gpu=device, node=node, valid_from=at)
        device.node = node
        device.save(update_fields=["node"])
    return gpu


@transaction.atomic
def gpu_reclassify(*, gpu: Gpu, gpu_class: GpuClass, at: datetime) -> Gpu:
    """Price a GPU as another class from `at`; seconds before stay in the old class."""
    at = whole_second(at)
    if gpu.gpu_class_id == gpu_class.id:
        return gpu
    GpuClassInterval.objects.filter(gpu=gpu, valid_until__isnull=True).update(valid_until=at)
    GpuClassInterval.objects.create(gpu=gpu, gpu_class=gpu_class, valid_from=at)
    gpu.gpu_class = gpu_class
    gpu.save(update_fields=["gpu_class"])
    return gpu


@transaction.atomic
def model_mapping_save(*, mapping: GpuModelMapping, actor, at: datetime) -> GpuModelMapping:
    """Map an NVML model name to a class; GPUs of that model move to it from `at`
    (seconds before stay priced as the class they had)."""
    from gpuquota.core.services import audit_record
    from gpuquota.outbox.services import gpu_interval_mark_dirty

    at = whole_second(at)
    mapping.full_clean()
    mapping.save()
    moved = [
        gpu_reclassify(gpu=gpu, gpu_class=mapping.gpu_class, at=at)
        for gpu in Gpu.objects.filter(model_name=mapping.model_name, parent__isnull=True)
        .exclude(gpu_class=mapping.gpu_class)
        .select_related("gpu_class")
    ]
    for gpu in moved:
        gpu.mig_devices.update(gpu_class=mapping.gpu_class)
    if moved:
        # The hour in progress now holds seconds of two classes.
        gpu_interval_mark_dirty(gpu_ids=[gpu.id for gpu in moved], start=at, end=at)
    audit_record(
        actor=actor,
        action="gpu_model_mapping.save",
        obj=mapping,
        changes={
            "model_name": mapping.model_name,
            "gpu_class": mapping.gpu_class.name,
            "gpus_reclassified": [gpu.uuid for gpu in moved],
        },
    )
    return mapping


@transaction.atomic
def model_mapping_delete(*, mapping: GpuModelMapping, actor, at: datetime) -> list[Gpu]:
    """Remove a model's mapping: its GPUs get the class named after the model from `at`,
    as an unmapped model's do (seconds before stay in the class they had); audited, the
    hour in progress marked. Returns the GPUs reclassified."""
    from gpuquota.core.services import audit_record
    from gpuquota.outbox.services import gpu_interval_mark_dirty

    at = whole_second(at)
    model_name, old_class = mapping.model_name, mapping.gpu_class
    entry = audit_record(actor=actor, action="gpu_model_mapping.delete", obj=mapping,
                         changes={"model_name": model_name, "gpu_class": old_class.name})
    mapping.delete()
    unmapped = gpu_class_for_model(model_name=model_name)
    moved = [
        gpu_reclassify(gpu=gpu, gpu_class=unmapped, at=at)
        for gpu in Gpu.objects.filter(model_name=model_name, parent__isnull=True)
        .exclude(gpu_class=unmapped)
    ]
    for gpu in moved:
        gpu.mig_devices.update(gpu_class=unmapped)
    if moved:
        gpu_interval_mark_dirty(gpu_ids=[gpu.id for gpu in moved], start=at, end=at)
    entry.changes["gpus_reclassified"] = [gpu.uuid for gpu in moved]
    entry.save(update_fields=["changes"])
    return moved
