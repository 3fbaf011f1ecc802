"""Jobs as gpuquota sees them (docs/jobs.md): a Slurm job's run (from its accounting and the
GPUs slurmctld said it held), a Kubernetes pod or a process with no scheduler (from the
agents' process records), with the GPUs it held and, once it has ended and its samples are
in, its report's figures and notes (the page recomputes the series from the samples)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class Job(models.Model):
    class Source(models.TextChoices):
        SLURM = "slurm", "Slurm"
        KUBERNETES = "kubernetes", "Kubernetes"
        DOCKER = "docker", "Docker"
        UNIX = "unix", "Process"

    cluster = models.ForeignKey("inventory.Cluster", on_delete=models.PROTECT, related_name="+")
    source = models.CharField(max_length=16, choices=Source.choices)
    job_id = models.CharField(max_length=256, help_text="Slurm's job id, the pod, or pid@start.")
    started_at = WholeSecondDateTimeField()
    ended_at = WholeSecondDateTimeField(null=True, blank=True)
    state = models.CharField(max_length=32, blank=True)
    user_name = models.CharField(max_length=256, blank=True, help_text="The cluster's user.")
    account = models.CharField(max_length=256, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    time_limit_s = models.PositiveIntegerField(null=True, blank=True)
    interactive = models.BooleanField(default=False)
    gpus_held = models.PositiveIntegerField(default=0)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.PROTECT,
                             related_name="+")
    # The report's figures, stored once the job has ended and settled.
    reported_at = WholeSecondDateTimeField(null=True, blank=True, db_index=True)
    held_gpu_s = models.BigIntegerField(default=0)
    idle_gpu_s = models.BigIntegerField(default=0)
    wasted_gpu_s = models.BigIntegerField(default=0)
    util_avg_pct = models.DecimalField(max_digits=5, decimal_places=1, null=True, blank=True)
    cost = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    wasted_cost = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    notified_at = WholeSecondDateTimeField(null=True, blank=True)
    zero_use_since = WholeSecondDateTimeField(
        null=True, blank=True, help_text="The start of the zero use last warned about.")
    zero_use_warned_at = WholeSecondDateTimeField(null=True, blank=True)
    zero_use_last_warned_at = WholeSecondDateTimeField(
        null=True, blank=True, help_text="The last warning before the job is stopped.")
    zero_use_cancelled_at = WholeSecondDateTimeField(
        null=True, blank=True, help_text="When the scheduler showed the job stopped.")
    zero_use_stopped_how = models.CharField(
        max_length=16, blank=True,
        help_text="cancelled, requeued, deleted (a pod) or suspended (a Job or Workload).")
    zero_use_cancel_failed_at = WholeSecondDateTimeField(null=True, blank=True)
    zero_use_cancel_failures = models.PositiveIntegerField(
        default=0, help_text="Stops the scheduler refused in this stretch (each retry waits "
                             "twice as long, at most RETRY_MAX).")
    last_seen_at = WholeSecondDateTimeField(
        null=True, blank=True,
        help_text="A pod's, container's or process's last record's end, as far as collected.")

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "source", "job_id", "started_at"],
                                    name="job_unique_run"),
            models.CheckConstraint(
                condition=Q(source__in=["slurm", "kubernetes", "docker", "unix"]),
                name="job_source_valid"),
            models.CheckConstraint(condition=Q(ended_at__isnull=True)
                                   | Q(ended_at__gte=models.F("started_at")),
                                   name="job_end_after_start"),
        ]
        indexes = [models.Index(fields=["owner", "started_at"]),
                   models.Index(fields=["team", "started_at"])]

    def __str__(self) -> str:
        return f"{self.cluster} {self.get_source_display()} job {self.job_id}"


class JobGpu(models.Model):
    """A GPU (or MIG device) the job held."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="job_gpus")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "gpu"], name="jobgpu_unique")]

    def __str__(self) -> str:
        return f"job #{self.job_id}: GPU {self.gpu_id}"


class JobNote(models.Model):
    """One pitfall the report named, with the GPU-seconds and money it wasted."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="notes")
    code = models.CharField(max_length=32)
    severity = models.CharField(max_length=8)
    title = models.CharField(max_length=300)
    advice = models.CharField(max_length=500)
    wasted_gpu_s = models.BigIntegerField(default=0)
    wasted_cost = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)

    class Meta:
        ordering = ["-wasted_gpu_s", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "code"], name="jobnote_unique")]

    def __str__(self) -> str:
        return f"job #{self.job_id}: {self.code}"


class JobCollectMark(models.Model):
    """How far a cluster's process records were collected (docs/jobs.md, Where jobs come
    from): the next pass reads from `records_until` less an overlap, and the whole lookback
    again once `full_at` is older than `JOBS_COLLECT_FULL_EVERY_S`."""

    cluster = models.OneToOneField("inventory.Cluster", on_delete=models.CASCADE,
                                   related_name="+")
    records_until = WholeSecondDateTimeField()
    full_at = WholeSecondDateTimeField()

    def __str__(self) -> str:
        return f"cluster #{self.cluster_id}: records collected until {self.records_until}"


class JobMailOptOut(models.Model):
    """A user who asked not to be mailed about their wasteful jobs."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                related_name="+")
    created_at = WholeSecondDateTimeField()

    def __str__(self) -> str:
        return f"user #{self.user_id}: no job mail"
