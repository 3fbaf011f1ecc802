"""What agents send, stored as received (agent-protocol.md).

Identities: a sample is (gpu, window_start); a process record is
(gpu, window_start, pid, pid_start); an event is its event_id. The first stored
wins. `gpu` may be a MIG device: accounting rolls it into its parent. Samples and
process records name the batch receipt that stored them: a sample's processes are
those its own batch stored.
"""

from django.conf import settings
from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class HashedSecret(models.Model):
    """A bearer secret kept only as its hash (`gpuquota.core.tokens.token_hash`) and the prefix
    shown to admins; who made it, when, and when it was revoked."""

    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]


class BootstrapSecret(HashedSecret):
    """A cluster's enrolment secret (agent-enrolment.md), stored hashed: it can only enrol a
    node of its cluster, never report. At most one is live per cluster; rotating revokes it."""

    cluster = models.ForeignKey("inventory.Cluster", on_delete=models.PROTECT,
                                related_name="bootstrap_secrets")

    class Meta(HashedSecret.Meta):
        constraints = [
            models.UniqueConstraint(fields=["cluster"], condition=models.Q(revoked_at__isnull=True),
                                    name="bootstrap_secret_one_live_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.cluster_id})"


class NodeToken(HashedSecret):
    """The bearer secret of one node's agent, stored hashed; rotated and revoked by admins."""

    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="tokens")
    enrolled_with = models.ForeignKey(
        BootstrapSecret, null=True, blank=True, on_delete=models.PROTECT, related_name="tokens",
        help_text="The bootstrap secret the node's agent enrolled with, if it enrolled itself.")

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.node_id})"



class AgentBatch(models.Model):
    """A batch accepted from a node, remembered (with its response) for replays."""

    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="batches")
    batch_id = models.UUIDField()
    agent_instance_id = models.UUIDField()
    boot_id = models.CharField(max_length=64, blank=True)
    seq_first = models.BigIntegerField(null=True)
    seq_last = models.BigIntegerField(null=True)
    sent_at = models.DateTimeField(null=True)
    received_at = models.DateTimeField(db_index=True)
    clock_skew_s = models.FloatField(null=True)
    response_body = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "batch_id"], name="agent_batch_unique")
        ]

    def __str__(self) -> str:
        return str(self.batch_id)



class NodeBoot(models.Model):
    """One boot of a node, as its agent reported `boot_id`; never deleted, so the samples
    and events sent under it keep their boot (health's automatic close reads it)."""

    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="boots")
    boot_id = models.CharField(max_length=64)
    first_received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "boot_id"], name="node_boot_unique")
        ]

    def __str__(self) -> str:
        return f"{self.node_id} boot {self.boot_id}"


def _receipt_field() -> models.ForeignKey:
    # No database constraint or index, as for the boot; receipts expire (30 days) before
    # the raw records (RAW_SAMPLE_RETENTION_DAYS), and the id stays a tie between them.
    return models.ForeignKey(
        AgentBatch, null=True, on_delete=models.DO_NOTHING, related_name="+",
        db_constraint=False, db_index=False,
        help_text="The receipt of the agent batch that stored it: a sample's process records "
                  "are those stored by the same batch (null: stored before receipts were kept "
                  "on records, tied by received_at).",
    )


def _boot_field() -> models.ForeignKey:
    # No database constraint or index: checked per row it would slow every COPY; boots
    # are never deleted.
    return models.ForeignKey(
        NodeBoot, null=True, on_delete=models.DO_NOTHING, related_name="+",
        db_constraint=False, db_index=False,
        help_text="The boot of the node the record was collected under (its batch's boot_id).",
    )


class Sample(models.Model):
    """One GPU's state over [window_start, window_end).

    On PostgreSQL this table (and ProcessRecord's) is range-partitioned by day on
    window_start (migration 0001, `partitions.py`)."""

    pk = models.CompositePrimaryKey("gpu_id", "window_start")
    # The primary key starts with gpu_id: no separate index (it would slow every insert).
    gpu = models.ForeignKey(
        "inventory.Gpu", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    window_start = WholeSecondDateTimeField()
    window_end = WholeSecondDateTimeField()
    readings = models.IntegerField()
    util_gpu_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    util_gpu_max = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    util_mem_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    memory_used_bytes_avg = models.BigIntegerField(null=True)
    memory_used_bytes_max = models.BigIntegerField(null=True)
    power_w_avg = models.FloatField(null=True)
    energy_j = models.FloatField(null=True)
    temp_c_max = models.SmallIntegerField(null=True)
    clock_event_reasons = models.BigIntegerField(null=True)
    ecc_uncorrected = models.BigIntegerField(null=True)
    ecc_corrected = models.BigIntegerField(null=True)
    # DCGM's profiling fields, as percentages over the window (the telemetry importer's, where
    # the exporter has them; the agent reads none yet): null is no data, never 0.
    sm_active_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    sm_occupancy_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    tensor_active_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    dram_active_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    received_at = models.DateTimeField()
    boot = _boot_field()
    receipt = _receipt_field()

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.window_start:%Y-%m-%dT%H:%M:%SZ}"



class ProcessRecord(models.Model):
    """Who used a GPU in a window: one process."""

    class JobSource(models.TextChoices):
        SLURM = "slurm", "Slurm"
        KUBERNETES = "kubernetes", "Kubernetes"
        DOCKER = "docker", "Docker"
        UNIX = "unix", "Unix"

    pk = models.CompositePrimaryKey("gpu_id", "window_start", "pid", "pid_start")
    # The primary key starts with gpu_id: no separate index (it would slow every insert).
    gpu = models.ForeignKey(
        "inventory.Gpu", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    window_start = WholeSecondDateTimeField()
    window_end = WholeSecondDateTimeField()
    pid = models.IntegerField()
    pid_start = models.BigIntegerField()
    uid = models.BigIntegerField(null=True)
    user = models.CharField(max_length=256, null=True)
    command = models.CharField(max_length=256, null=True)
    job_source = models.CharField(max_length=16, choices=JobSource.choices, null=True)
    job_id = models.CharField(max_length=256, null=True)
    job_account = models.CharField(max_length=256, null=True)
    memory_used_bytes_max = models.BigIntegerField(null=True)
    util_sm_avg = models.DecimalField(max_digits=5, decimal_places=2, null=True)
    received_at = models.DateTimeField()
    receipt = _receipt_field()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(job_source__isnull=True)
                | models.Q(job_source__in=["slurm", "kubernetes", "docker", "unix"]),
                name="process_record_job_source_valid",
            )
        ]

    def __str__(self) -> str:
        return f"pid {self.pid} on gpu {self.gpu_id} @ {self.window_start:%Y-%m-%dT%H:%M:%SZ}"



class EventType(models.TextChoices):
    XID = "xid", "XID error"
    GPU_LOST = "gpu_lost", "GPU lost"
    ECC_UNCORRECTED = "ecc_uncorrected", "Uncorrected ECC error"
    REMAP_PENDING = "remap_pending", "Row remap pending"
    COUNTER_RESET = "counter_reset", "Energy counter reset"
    NVML_UNAVAILABLE = "nvml_unavailable", "NVML unavailable"
    AGENT_RESTART = "agent_restart", "Agent restart"
    DATA_DROPPED = "data_dropped", "Agent dropped data"
    CLOCK_SKEW = "clock_skew", "Clock skew"


class GpuEvent(models.Model):
    """Something that happened on a node or GPU (XID, lost GPU, agent restart...)."""

    Type = EventType

    event_id = models.UUIDField(primary_key=True)
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="events")
    gpu = models.ForeignKey(
        "inventory.Gpu", null=True, on_delete=models.PROTECT, related_name="events"
    )
    ts = WholeSecondDateTimeField(db_index=True)
    type = models.CharField(max_length=32, choices=Type.choices)
    xid = models.IntegerField(null=True)
    detail = models.CharField(max_length=256, null=True)
    received_at = models.DateTimeField()
    boot = _boot_field()

    class Meta:
        ordering = ["-ts"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(type__in=EventType.values), name="gpu_event_type_valid"
            ),
            models.CheckConstraint(
                condition=~models.Q(type="xid") | models.Q(xid__isnull=False),
                name="gpu_event_xid_required",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} @ {self.ts:%Y-%m-%dT%H:%M:%SZ}"

