from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class MailDelivery(models.Model):
    """One message to one recipient under one key (a statement's sending, a decision on a
    reservation...). The row is what makes a retry mail only those not yet served.

    Rows written by `mail_send_later` are the outbox: they carry the message's context
    (`context_json`) and `next_attempt_at`, are written in the transaction of the change
    that causes them, and are sent by the `mail.send` task or the `mail.send_due` sweep
    (`gpuquota.mail.outbox`). Rows of a direct `mail_send` have neither: their caller owns
    the retries (a statement's sweep, reclaim's notices)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued with the change that caused it; not tried yet"
        SENDING = "sending", "Sending (or interrupted while sending)"
        SENT = "sent", "Accepted by the SMTP server"
        FAILED = "failed", "Failed; retried later"
        GIVEN_UP = "given_up", "Failed at every attempt; no longer retried"
        SKIPPED = "skipped", "Not sent: opted out or no address"

    key = models.CharField(max_length=200)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="mail_deliveries"
    )
    template = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SENDING)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    message_id = models.CharField(max_length=200, blank=True)
    context_json = models.TextField(
        null=True, blank=True, help_text="The template context (kombu JSON) of a queued message")
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When the sweep may next try a queued message")
    created_at = WholeSecondDateTimeField(auto_now_add=True)
    updated_at = WholeSecondDateTimeField(auto_now=True)
    sent_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "mail deliveries"
        constraints = [
            models.UniqueConstraint(fields=["key", "recipient"], name="mail_delivery_once"),
            models.CheckConstraint(
                condition=Q(status__in=["queued", "sending", "sent", "failed", "given_up",
                                        "skipped"]),
                name="mail_delivery_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="sent", sent_at__isnull=False) | ~Q(status="sent"),
                name="mail_delivery_sent_has_time",
            ),
            models.CheckConstraint(
                condition=Q(context_json__isnull=True, next_attempt_at__isnull=True)
                | Q(context_json__isnull=False, next_attempt_at__isnull=False),
                name="mail_delivery_outbox_has_due_time",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=["queued", "given_up"]) | Q(context_json__isnull=False),
                name="mail_delivery_queued_is_outbox",
            ),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="mail_delivery_due_idx",
                         condition=Q(status__in=["queued", "sending", "failed"],
                                     context_json__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.recipient} ({self.status})"
