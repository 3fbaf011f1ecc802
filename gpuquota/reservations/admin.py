"""Django admin: quotas are edited here; reservations are read-only here (every
change goes through the services, which check capacity and write the audit log)."""

from django.contrib import admin

from gpuquota.reservations.models import Assignment, Quota, Reservation


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "gpu_class", "gpus", "valid_from", "valid_until"]
    list_filter = ["gpu_class", "team"]


class AssignmentInline(admin.TabularInline):
    model = Assignment
    extra = 0
    can_delete = False
    fields = ["gpu", "assigned_from", "assigned_until", "end_reason"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "gpu_class", "count", "start", "end", "status", "over_quota",
                    "is_backfill"]
    list_filter = ["status", "gpu_class", "team", "over_quota", "is_backfill"]
    search_fields = ["team__name", "purpose"]
    inlines = [AssignmentInline]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Reservation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
