from django.contrib import admin

from gpuquota.core.admin import ReadOnlyAdmin
from gpuquota.mail.models import MailDelivery


@admin.register(MailDelivery)
class MailDeliveryAdmin(ReadOnlyAdmin):
    """Read-only: the record of what was mailed to whom (written by the mail module only)."""

    list_display = ["key", "recipient", "template", "status", "attempts", "next_attempt_at",
                    "sent_at", "updated_at"]
    list_filter = ["status", "template"]
    search_fields = ["key", "recipient__username", "recipient__email", "message_id"]
    readonly_fields = [f.name for f in MailDelivery._meta.fields]
