from django.conf import settings
from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class AuditEntry(models.Model):
    """Who did what, when and why. Append-only: written by services, never edited."""

    at = WholeSecondDateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty for the system (scheduled jobs).",
    )
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    changes = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.object_type}#{self.object_id}"


class IdempotencyKey(models.Model):
    """A creating request's key, per user (an API's `Idempotency-Key` header, or a web
    form's one-time token): what the request was (a fingerprint of its method, path and
    body) and the answer it got, kept until `expires_at`. The unique constraint is what
    makes two racing requests with one key run once (`gpuquota.core.idempotency`)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="+")
    key = models.CharField(max_length=300)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    # JSON as text, not jsonb: a replay's keys come in the first answer's order
    response_body = models.TextField(blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.user_id})"
