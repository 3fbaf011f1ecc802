"""What gpuquota keeps about each cluster's scheduler backend: its configuration (with the
credential encrypted), the capabilities it detected, the objects it owns there, drift
found and repaired, problems, each reconcile run, and how strongly each reservation is
held (its binding level)."""

from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField
from gpuquota.schedulers.validators import endpoint_url_validate


class BackendConfig(models.Model):
    """How gpuquota reaches one cluster's scheduler. The credential is stored encrypted
    (`gpuquota.schedulers.secrets`) and never shown; every change is audited."""

    class Mode(models.TextChoices):
        WRITE = "write", "Write: apply the plan"
        EXPORT = "export", "Export only: the site applies the plan itself"
        OFF = "off", "Off"

    cluster = models.OneToOneField(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="backend_config"
    )
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.WRITE)
    commands_dir = models.CharField(
        max_length=255, blank=True,
        help_text="Directory of the scheduler's commands (empty: found on PATH).",
    )
    api_url = models.CharField(
        max_length=200, blank=True, validators=[endpoint_url_validate],
        help_text="The scheduler's REST endpoint (slurmrestd, the Kubernetes API).",
    )
    token_encrypted = models.TextField(blank=True, editable=False)
    command_timeout_s = models.PositiveIntegerField(default=30)
    options = models.JSONField(
        default=dict, blank=True, help_text="Backend-specific settings (see docs/schedulers.md)."
    )
    updated_at = models.DateTimeField(auto_now=True)
    last_reconciled_at = WholeSecondDateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "scheduler backend configuration"
        constraints = [
            models.CheckConstraint(
                condition=Q(mode__in=["write", "export", "off"]), name="backendconfig_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(command_timeout_s__gte=1, command_timeout_s__lte=600),
                name="backendconfig_timeout_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.get_mode_display()}"


class Capabilities(models.Model):
    """What the backend detected on its cluster, the last time it looked."""

    cluster = models.OneToOneField(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="scheduler_capabilities"
    )
    detected_at = WholeSecondDateTimeField()
    version = models.CharField(max_length=64, blank=True)
    best_binding = models.CharField(max_length=16, blank=True)
    facts = models.JSONField(default=dict, blank=True)
    notes = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name_plural = "capabilities"

    def __str__(self) -> str:
        return f"{self.cluster}: {self.version or 'unknown version'}"


class ManagedObject(models.Model):
    """An object gpuquota wrote on a cluster, as last applied (what drift is measured
    against). `created`: gpuquota created it (recorded when it did): only those are ever
    deleted, whatever their name or description says. `site_fields`: for a site's own
    object, the managed fields as the site had them before gpuquota's first write, which
    `slurm_reconcile --remove` puts back."""

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="managed_objects"
    )
    kind = models.CharField(max_length=32)
    name = models.CharField(max_length=255)
    fields = models.JSONField(default=dict)
    applied_at = WholeSecondDateTimeField()
    created = models.BooleanField(default=False)
    site_fields = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cluster", "kind", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "kind", "name"], name="managedobject_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.kind} {self.name}"


class Drift(models.Model):
    """A managed object found edited or deleted by someone else, and its repair."""

    class Kind(models.TextChoices):
        MISSING = "missing", "Deleted outside gpuquota"
        CHANGED = "changed", "Edited outside gpuquota"

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="scheduler_drifts"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    object_kind = models.CharField(max_length=32)
    object_name = models.CharField(max_length=255)
    expected = models.JSONField(default=dict)
    observed = models.JSONField(default=dict, blank=True)
    detected_at = WholeSecondDateTimeField(db_index=True)
    repaired_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-detected_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["missing", "changed"]), name="drift_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.object_kind} {self.object_name} {self.kind}"


class Problem(models.Model):
    """Why a cluster's scheduler is not doing what gpuquota decided: open until a
    reconcile run succeeds; shown on the admin pages."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        RESOLVED = "resolved", "Resolved"

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="scheduler_problems"
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    summary = models.CharField(max_length=255)
    detail = models.TextField(blank=True)
    first_seen_at = WholeSecondDateTimeField()
    last_seen_at = WholeSecondDateTimeField()
    occurrences = models.PositiveIntegerField(default=1)
    resolved_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status="open", resolved_at__isnull=True)
                | Q(status="resolved", resolved_at__isnull=False),
                name="problem_status_valid",
            ),
            models.UniqueConstraint(
                fields=["cluster", "summary"], condition=Q(status="open"),
                name="problem_one_open_per_summary",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.summary}"


class ReconcileRun(models.Model):
    """One pass of plan, observe, diff and apply (or render, for a dry run or an export)."""

    class Outcome(models.TextChoices):
        RUNNING = "running", "Running"
        OK = "ok", "Done"
        DRY_RUN = "dry_run", "Dry run"
        EXPORTED = "exported", "Exported"
        FAILED = "failed", "Failed"
        PARTIAL = "partial", "Partly applied"

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="reconcile_runs"
    )
    reason = models.CharField(max_length=128)
    started_at = WholeSecondDateTimeField(db_index=True)
    finished_at = WholeSecondDateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.RUNNING)
    commands = models.JSONField(default=list, blank=True, help_text="Rendered actions.")
    applied = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    outcome__in=["running", "ok", "dry_run", "exported", "failed", "partial"]
                ),
                name="reconcilerun_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.started_at:%Y-%m-%d %H:%M:%S} {self.outcome}"


class BindingLevel(models.TextChoices):
    """How strongly the scheduler holds a reservation, strongest first."""

    EXACT_GPUS = "exact_gpus", "Exact GPUs"
    WHOLE_NODES = "whole_nodes", "Whole nodes"
    QUOTA = "quota", "Quota"
    ADVISORY = "advisory", "Advisory"


class ReservationBinding(models.Model):
    """The binding level a reservation got at the last reconcile, and why."""

    reservation = models.OneToOneField(
        "reservations.Reservation", on_delete=models.PROTECT, related_name="binding"
    )
    level = models.CharField(max_length=16, choices=BindingLevel.choices)
    why = models.CharField(max_length=512)
    scheduler_object = models.CharField(max_length=255, blank=True)
    updated_at = WholeSecondDateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(level__in=["exact_gpus", "whole_nodes", "quota", "advisory"]),
                name="reservationbinding_level_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"reservation #{self.reservation_id}: {self.get_level_display()}"


class SlurmJob(models.Model):
    """One run of a Slurm job as its accounting reports it (`sacct --json`); a requeued job
    has one row per run (its submit time changes at each requeue)."""

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="slurm_jobs"
    )
    job_id = models.CharField(max_length=32)
    submitted_at = WholeSecondDateTimeField()
    started_at = WholeSecondDateTimeField(null=True, blank=True)
    ended_at = WholeSecondDateTimeField(null=True, blank=True)
    state = models.CharField(max_length=32)
    account = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=64, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    qos = models.CharField(max_length=64, blank=True)
    reservation = models.CharField(max_length=255, blank=True)
    nodes = models.CharField(max_length=1024, blank=True)
    gpu_tres = models.CharField(max_length=255, blank=True, help_text="e.g. gres/gpu:h100=2")
    gpus = models.PositiveIntegerField(default=0)
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The team whose Slurm account ran it (a cluster identity).",
    )
    time_limit_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its time limit (sacct's Timelimit); none: unlimited.")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "job_id", "submitted_at"], name="slurmjob_unique_run"
            )
        ]
        indexes = [models.Index(fields=["cluster", "reservation"])]

    def __str__(self) -> str:
        return f"{self.cluster} job {self.job_id} ({self.state})"


class SlurmJobGpu(models.Model):
    """A GPU a Slurm job held while it ran, as slurmctld said then (`scontrol -d show job`,
    `IDX:`): Slurm's accounting keeps GPU counts, never which GPUs. One row per job, node
    and index, with when it was first and last seen running there."""

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="slurm_job_gpus"
    )
    job_id = models.CharField(max_length=32)
    node = models.CharField(max_length=64, help_text="Slurm's node name.")
    gpu_index = models.PositiveIntegerField(help_text="Slurm's GPU index on the node (IDX).")
    gpu = models.ForeignKey(
        "inventory.Gpu", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The inventory's GPU at that node and index, when there is one.",
    )
    account = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=64, blank=True)
    first_seen_at = WholeSecondDateTimeField()
    last_seen_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-last_seen_at", "node", "gpu_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "job_id", "node", "gpu_index"], name="slurmjobgpu_unique"
            ),
            models.CheckConstraint(
                condition=Q(last_seen_at__gte=models.F("first_seen_at")),
                name="slurmjobgpu_seen_order",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} on {self.node} GPU {self.gpu_index}"


class ImportCursor(models.Model):
    """How far a cluster's job accounting has been imported."""

    cluster = models.OneToOneField(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="slurm_import_cursor"
    )
    imported_until = WholeSecondDateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster}: {self.imported_until:%Y-%m-%d %H:%M:%S}"


class LoanReturn(models.Model):
    """A lent GPU given back by Slurm: the owner's job submitted, the borrower's job
    preempted, the owner's job started (all read from Slurm's accounting)."""

    loan = models.ForeignKey(
        "reservations.Loan", on_delete=models.PROTECT, related_name="slurm_returns"
    )
    owner_job_id = models.CharField(max_length=32)
    borrower_job_id = models.CharField(max_length=32)
    owner_submitted_at = WholeSecondDateTimeField()
    borrower_preempted_at = WholeSecondDateTimeField()
    owner_started_at = WholeSecondDateTimeField()
    time_to_return_s = models.PositiveIntegerField()

    class Meta:
        ordering = ["-owner_started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["loan", "owner_job_id"], name="loanreturn_unique"),
            models.CheckConstraint(
                condition=Q(owner_started_at__gte=models.F("owner_submitted_at")),
                name="loanreturn_order",
            ),
        ]

    def __str__(self) -> str:
        return f"loan #{self.loan_id}: {self.time_to_return_s} s"


class PodKilled(models.Model):
    """A pod the cluster ended for a node's trouble, as the API server showed it
    (`schedulers/kubernetes/evictions.py`): evicted by the kubelet (`status.reason`
    Evicted) or, with a `DisruptionTarget` condition, deleted by the taint manager (a
    NoExecute taint: the node not ready or unreachable) or ended by the kubelet (node
    pressure, a graceful node shutdown). Its GPUs are those its processes ran on."""

    cluster = models.ForeignKey("inventory.Cluster", on_delete=models.PROTECT, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    reason = models.CharField(max_length=64)
    ended_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-ended_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["cluster", "uid"],
                                               name="podkilled_unique")]

    def __str__(self) -> str:
        return f"pod {self.namespace}/{self.name} ({self.reason})"
