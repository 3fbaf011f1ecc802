"""Drains: a node, or one GPU where the scheduler can name it, kept from new work for a
GPU's failure, until the fix the failure needs (docs/reliability.md#drains)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField
from gpuquota.ingest.taxonomy import Action


class Drain(models.Model):
    class State(models.TextChoices):
        DRAINED = "drained", "Drained on the scheduler"
        RECORDED = "recorded", "Recorded (no scheduler backend writes for the cluster)"
        REFUSED = "refused", "The scheduler refused the drain"
        PENDING = "pending", "Being written to the scheduler"

    class Scope(models.TextChoices):
        NODE = "node", "The node (Slurm State=DRAIN, a Kubernetes cordon)"
        GPU = "gpu", "The GPU alone (a DRA DeviceTaintRule)"

    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="drains")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="drains")
    reason = models.CharField(max_length=120, help_text="`xid 79`, `gpu_lost`...")
    needs = models.CharField(max_length=16, choices=[(a.value, a.value) for a in Action],
                             help_text="The fix the failure needs before the node returns")
    event_at = WholeSecondDateTimeField(help_text="When the failure happened")
    drained_at = WholeSecondDateTimeField(help_text="When gpuquota drained the node")
    state = models.CharField(max_length=16, choices=State.choices)
    scope = models.CharField(
        max_length=8, choices=Scope.choices, default=Scope.NODE,
        help_text="What the scheduler holds: the node, or the failed GPU alone (Kubernetes "
        "with DRA device taints)")
    after_jobs = models.BooleanField(
        default=False, help_text="A lesser (warning) event: the running jobs finish first (the "
        "node shows DRAINING until they end); a critical one drains at once.")
    class Progress(models.TextChoices):
        UNKNOWN = "", "Not read"
        DRAINING = "draining", "Draining: jobs still running"
        DRAINED = "drained", "Drained: no job left"

    progress = models.CharField(
        max_length=16, choices=Progress.choices, blank=True, default="",
        help_text="As the scheduler last showed it (Slurm MIXED+DRAIN vs IDLE+DRAIN; on "
        "Kubernetes, pods still running on the node or using the GPU, or none)")
    progress_at = WholeSecondDateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    released_at = WholeSecondDateTimeField(null=True, blank=True)
    released_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                    on_delete=models.PROTECT, related_name="+")
    release_fix = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ["-drained_at"]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=Q(released_at__isnull=True,
                                                                 scope="node"),
                                    name="drain_one_open_per_node"),
            models.UniqueConstraint(fields=["gpu"], condition=Q(released_at__isnull=True),
                                    name="drain_one_open_per_gpu"),
            models.CheckConstraint(condition=Q(scope__in=["node", "gpu"]),
                                   name="drain_scope_valid"),
            models.CheckConstraint(
                condition=Q(state__in=["drained", "recorded", "refused", "pending"]),
                name="drain_state_valid"),
            models.CheckConstraint(condition=Q(progress__in=["", "draining", "drained"]),
                                   name="drain_progress_valid"),
        ]

    def __str__(self) -> str:
        what = f"{self.node} GPU {self.gpu.index}" if self.scope == self.Scope.GPU else self.node
        return f"{what} drained for {self.reason}"

    @property
    def node_wide(self) -> bool:
        """Whether the scheduler keeps the whole node from new work (every GPU held out):
        written, or being written (drainwrite.py)."""
        return self.state in HOLDING_STATES and self.scope == self.Scope.NODE


#: The states of a drain the scheduler holds, or is being written to hold (drainwrite.py).
HOLDING_STATES = (Drain.State.DRAINED, Drain.State.PENDING)


class Rma(models.Model):
    """A GPU sent back to its vendor (RMA), by its board serial; it keeps the slot's history
    when the GPU that replaces it comes with a new UUID in the same slot (node and index)."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="rmas",
                            help_text="The GPU sent back (its UUID, its history)")
    serial = models.CharField(max_length=64, help_text="The board serial (nvidia-smi -q)")
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="+",
                             help_text="The slot: the node the GPU was in")
    index = models.PositiveIntegerField(null=True, blank=True, help_text="The slot's index")
    reason = models.CharField(max_length=200)
    drain = models.ForeignKey(Drain, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="rmas")
    opened_at = WholeSecondDateTimeField()
    opened_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                  related_name="+")
    replacement = models.ForeignKey("inventory.Gpu", null=True, blank=True,
                                    on_delete=models.PROTECT, related_name="replaces",
                                    help_text="The GPU that took the slot (a new UUID)")
    replaced_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        verbose_name = "RMA"
        constraints = [
            models.UniqueConstraint(fields=["gpu"], condition=Q(replacement__isnull=True),
                                    name="rma_one_open_per_gpu"),
            models.CheckConstraint(condition=~Q(serial=""), name="rma_serial_given"),
        ]

    def __str__(self) -> str:
        return f"RMA of {self.serial} ({self.gpu})"


class FiguresSnapshot(models.Model):
    """The fleet's reliability figures as of an instant, written by the `reliability.figures`
    task (docs/reliability.md#figures): what the fleet page, the API's present figures and
    /metrics read, instead of replaying every GPU's history at each request."""

    as_of = WholeSecondDateTimeField(unique=True, help_text="What was recorded by then counts")
    days = models.PositiveIntegerField(help_text="The figures' window")
    took_s = models.FloatField(help_text="How long the computation took (wall seconds)")
    classes = models.JSONField(default=list, help_text="Figures per class")
    clusters = models.JSONField(default=list, help_text="Figures per cluster")
    by = models.JSONField(default=dict, help_text="Failures by component and by action")
    drift = models.JSONField(default=list)
    gpu_lemons = models.JSONField(default=list)
    node_lemons = models.JSONField(default=list)

    class Meta:
        ordering = ["-as_of"]

    def __str__(self) -> str:
        return f"reliability figures as of {self.as_of:%Y-%m-%d %H:%M}"


class UnitFigures(models.Model):
    """One GPU's or node's figures of a snapshot (the API's `group=gpu` and `group=node`)."""

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        NODE = "node", "Node"

    snapshot = models.ForeignKey(FiguresSnapshot, on_delete=models.CASCADE, related_name="units")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    key = models.CharField(max_length=255, help_text="The GPU's UUID, or cluster/hostname")
    figures = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "kind", "key"],
                                    name="unit_figures_one_per_key"),
            models.CheckConstraint(condition=Q(kind__in=["gpu", "node"]),
                                   name="unit_figures_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"
