"""Clusters, nodes, GPUs and the intervals that history is made of.

`Gpu.node` and `Gpu.gpu_class` are the current values, kept by the inventory
services together with the interval tables, which are the history that
accounting reads for any past instant.
"""

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q

from gpuquota.core.constraints import NoOverlap
from gpuquota.core.fields import WholeSecondDateTimeField

GPU_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def gpu_uuid_normalize(value: str) -> str:
    """`GPU-`/`MIG-` + lower-case hex: the stored form, so comparison is case-insensitive."""
    if not isinstance(value, str) or not GPU_UUID_RE.match(value):
        raise ValueError("not an NVML UUID (GPU-/MIG- followed by 8-4-4-4-12 hex digits)")
    return value[:4].upper() + value[4:].lower()


#: What NVML and nvidia-smi print for a board field a board does not carry (consumer boards).
BOARD_NOT_AVAILABLE = frozenset({"", "N/A", "[N/A]", "0"})


def board_text_normalize(value) -> str:
    """A board serial or part number as stored: trimmed, at most 64 characters, and "" for
    none (missing, not text, or "[N/A]")."""
    if not isinstance(value, str):
        return ""
    text = "".join(c for c in value if c.isprintable()).strip()[:64]
    return "" if text.upper() in BOARD_NOT_AVAILABLE else text


def validate_gpu_uuid(value: str) -> None:
    try:
        gpu_uuid_normalize(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def _interval_valid(name: str, start: str = "valid_from", end: str = "valid_until"):
    return models.CheckConstraint(
        condition=Q(**{f"{end}__isnull": True}) | Q(**{f"{end}__gt": F(start)}), name=name
    )


class Cluster(models.Model):
    class Scheduler(models.TextChoices):
        SLURM = "slurm", "Slurm"
        KUBERNETES = "kubernetes", "Kubernetes"
        NONE = "none", "None (bare nodes)"

    name = models.CharField(max_length=120, unique=True)
    slug = models.SlugField(max_length=64, unique=True)
    scheduler = models.CharField(max_length=16, choices=Scheduler.choices, default=Scheduler.NONE)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scheduler__in=["slurm", "kubernetes", "none"]),
                name="cluster_scheduler_valid",
            )
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A GPU server. Its agent authenticates with a node token (ingest app)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=253)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    boot_id = models.CharField(max_length=64, blank=True)
    clock_skew_s = models.FloatField(null=True, blank=True, help_text="received_at − sent_at")
    nvml_unavailable_since = models.DateTimeField(
        null=True, blank=True, help_text="The agent reports while NVML cannot answer: set by its "
        "nvml_unavailable event, cleared by a sample that ends after it.")

    class Meta:
        ordering = ["cluster__name", "hostname"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "hostname"], name="node_unique_hostname")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.hostname}"


class GpuClass(models.Model):
    """What is reserved, priced and given quota: `H100-80GB`, `L4`..."""

    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU class"
        verbose_name_plural = "GPU classes"

    def __str__(self) -> str:
        return self.name


class GpuModelMapping(models.Model):
    """NVML model name (`NVIDIA H100 80GB HBM3`) → GPU class, set by admins."""

    model_name = models.CharField(max_length=128, unique=True)
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="model_names")

    class Meta:
        ordering = ["model_name"]
        verbose_name = "NVML model mapping"

    def __str__(self) -> str:
        return f"{self.model_name} → {self.gpu_class}"


class Gpu(models.Model):
    """A physical GPU, or a MIG device of one (`parent` set). MIG devices are never
    reserved, priced or counted in capacity: their samples count for the parent."""

    uuid = models.CharField("NVML UUID", max_length=64, unique=True, validators=[validate_gpu_uuid])
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="mig_devices"
    )
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="gpus")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="gpus")
    model_name = models.CharField(max_length=128, blank=True)
    index = models.PositiveIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    serial = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="The board serial (nvmlDeviceGetSerial, nvidia-smi -q: Serial Number), as "
        "its agent or exporter reported it; empty where the board has none (consumer boards)")
    board_part_number = models.CharField(max_length=64, blank=True)
    commissioned_at = WholeSecondDateTimeField()
    retired_at = WholeSecondDateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__cluster__name", "node__hostname", "index", "uuid"]
        verbose_name = "GPU"
        constraints = [
            _interval_valid("gpu_service_interval_valid", "commissioned_at", "retired_at"),
            models.CheckConstraint(
                condition=Q(uuid__startswith="GPU-", parent__isnull=True)
                | Q(uuid__startswith="MIG-", parent__isnull=False),
                name="gpu_mig_has_parent",
            ),
        ]

    def __str__(self) -> str:
        return self.uuid

    @property
    def is_mig(self) -> bool:
        return self.parent_id is not None


class GpuNodeInterval(models.Model):
    """Which node a GPU was in, over [valid_from, valid_until)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="node_history")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="gpu_history")
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["gpu", "valid_from"]
        constraints = [
            _interval_valid("gpu_node_interval_valid"),
            NoOverlap(name="gpu_node_no_overlap", key=["gpu"]),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} on {self.node} from {self.valid_from:%Y-%m-%d %H:%M}"


class GpuClassInterval(models.Model):
    """Which class a GPU was priced as, over [valid_from, valid_until)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="class_history")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="gpu_history")
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["gpu", "valid_from"]
        constraints = [
            _interval_valid("gpu_class_interval_valid"),
            NoOverlap(name="gpu_class_no_overlap", key=["gpu"]),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} as {self.gpu_class} from {self.valid_from:%Y-%m-%d %H:%M}"


class GpuHealthInterval(models.Model):
    """A GPU not healthy over [valid_from, valid_until): `degraded` or `failed`.
    No interval means healthy."""

    class State(models.TextChoices):
        DEGRADED = "degraded", "Degraded"
        FAILED = "failed", "Failed"

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="health_history")
    state = models.CharField(max_length=16, choices=State.choices)
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=256, help_text="What opened it: `xid 79`, `gpu_lost`...")
    closed_reason = models.CharField(max_length=256, blank=True)
    boot_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="The node's boot when it opened: a failed "
        "interval closes after a new boot reports a good sample.",
    )
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["gpu", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["degraded", "failed"]), name="gpu_health_state_valid"
            ),
            _interval_valid("gpu_health_interval_valid"),
            NoOverlap(name="gpu_health_no_overlap", key=["gpu"]),
        ]

    def __str__(self) -> str:
        return f"{self.gpu} {self.state} from {self.valid_from:%Y-%m-%d %H:%M}"


class MaintenanceBlock(models.Model):
    """An admin takes a GPU out of capacity over [valid_from, valid_until)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="maintenance_blocks")
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=256)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-valid_from"]
        constraints = [_interval_valid("maintenance_interval_valid")]

    def __str__(self) -> str:
        return f"{self.gpu} blocked from {self.valid_from:%Y-%m-%d %H:%M}: {self.reason}"
