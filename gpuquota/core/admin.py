from django.contrib import admin

from gpuquota.core.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """For records only services write (audit log, rollups): browse, never edit."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Read-only: the audit log is written by services only."""

    list_display = ["at", "actor", "action", "object_type", "object_id", "team", "reason"]
    list_filter = ["action", "object_type", "team"]
    search_fields = ["action", "object_id", "reason", "actor__username"]
    date_hierarchy = "at"
