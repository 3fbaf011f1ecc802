from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class DirtyGpuHour(models.Model):
    """The outbox: a GPU-hour whose inputs changed and whose rollups must be
    recomputed. Marked in the same transaction as the change; `due_at` is when the sweep
    takes it and `marked_at` when its oldest change not rolled up yet was marked (see
    `gpuquota.outbox.services`: an open hour waits up to the freshness interval, less the
    sweep's slack; a closed one is due at once). Re-marking a mark that waits writes
    nothing; re-marking one already due bumps `generation`, and a sweep that read the
    old generation leaves the row for the next sweep."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    hour = WholeSecondDateTimeField()
    generation = models.BigIntegerField(default=1)
    marked_at = models.DateTimeField()
    due_at = models.DateTimeField()

    class Meta:
        db_table = "usage_dirtygpuhour"  # the table the usage app created, kept
        constraints = [
            models.UniqueConstraint(fields=["gpu", "hour"], name="dirty_gpu_hour_unique")
        ]
        indexes = [
            models.Index(fields=["marked_at"], name="usage_dirty_marked__8f6318_idx"),
            models.Index(fields=["due_at", "id"], name="outbox_dirty_due_idx"),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} {self.hour:%Y-%m-%d %H}:00 (generation {self.generation})"


class Notification(models.Model):
    """The notification outbox: one message to one channel endpoint (a Slack or Teams
    incoming webhook, a signed generic webhook), written in the transaction of the change
    that causes it and delivered, at least once, by the channel sweep
    (`gpuquota.outbox.notifications`). `message_id` is stable across retries (the
    receiver's deduplication key: `webhook-id`); `key` + `target` make queueing idempotent.
    The URL and the signing secret are stored encrypted (`outbox.sealing`)."""

    class Kind(models.TextChoices):
        SLACK = "slack", "Slack (incoming webhook, Block Kit)"
        TEAMS = "teams", "Microsoft Teams (Workflows webhook, Adaptive Card)"
        WEBHOOK = "webhook", "Webhook (signed, Standard Webhooks)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued; not delivered yet"
        SENT = "sent", "Delivered (2xx)"
        FAILED = "failed", "Failed; retried later"
        GIVEN_UP = "given_up", "Failed at every attempt; no longer retried"

    message_id = models.CharField(max_length=64, unique=True)
    key = models.CharField(max_length=200, help_text="What caused it (one event).")
    target = models.CharField(max_length=100, help_text="Whose channel: e.g. team-channel:7.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    event = models.CharField(max_length=64)
    url_sealed = models.TextField()
    secret_sealed = models.TextField(blank=True)
    body = models.TextField(help_text="The JSON body, exactly as sent and signed.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = WholeSecondDateTimeField()
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key", "target"], name="notification_once"),
            models.CheckConstraint(
                condition=models.Q(kind__in=["slack", "teams", "webhook"]),
                name="notification_kind_valid"),
            models.CheckConstraint(
                condition=models.Q(status__in=["queued", "sent", "failed", "given_up"]),
                name="notification_status_valid"),
            models.CheckConstraint(
                condition=~models.Q(status="sent") | models.Q(sent_at__isnull=False),
                name="notification_sent_has_time"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="notification_due_idx",
                         condition=models.Q(status__in=["queued", "failed"])),
            models.Index(fields=["target", "-created_at"], name="notification_target_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.target} ({self.status})"
