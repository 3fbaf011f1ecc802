from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class MailDelivery(models.Model):
    """One message to one recipient under one key (a statement's sending, a decision on a
    reservation...). The row is what makes a retry mail only those not yet served."""

    class Status(models.TextChoices):
        SENDING = "sending", "Sending (or interrupted while sending)"
        SENT = "sent", "Accepted by the SMTP server"
        FAILED = "failed", "Failed; retried later"
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
    created_at = WholeSecondDateTimeField(auto_now_add=True)
    updated_at = WholeSecondDateTimeField(auto_now=True)
    sent_at = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "mail deliveries"
        constraints = [
            models.UniqueConstraint(fields=["key", "recipient"], name="mail_delivery_once"),
            models.CheckConstraint(
                condition=Q(status__in=["sending", "sent", "failed", "skipped"]),
                name="mail_delivery_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="sent", sent_at__isnull=False) | ~Q(status="sent"),
                name="mail_delivery_sent_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.recipient} ({self.status})"
