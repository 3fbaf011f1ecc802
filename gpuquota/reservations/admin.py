"""Django admin: quotas are edited here through the quota services; reservations are
read-only here (every change goes through the services, which check capacity and write
the audit log)."""

from django.contrib import admin

from gpuquota.core.admin import ServiceAdminMixin, ServiceModelForm
from gpuquota.reservations.models import Assignment, Quota, Reservation
from gpuquota.reservations.quotas import quota_create, quota_end


class QuotaAdminForm(ServiceModelForm):
    """Saves through the quota services (audited; overlaps and gaps refused with the
    reason, on every database). A row's size and start are history: end it and add one."""

    class Meta:
        model = Quota
        fields = ["team", "gpu_class", "gpus", "valid_from", "valid_until"]

    def apply(self, data: dict) -> Quota:
        if self.instance._state.adding:
            return quota_create(team=data["team"], gpu_class=data["gpu_class"],
                                gpus=data["gpus"], valid_from=data["valid_from"],
                                valid_until=data.get("valid_until"), by=self.user)
        return quota_end(quota=Quota.objects.get(pk=self.instance.pk),
                         at=data.get("valid_until"), by=self.user)


@admin.register(Quota)
class QuotaAdmin(ServiceAdminMixin, admin.ModelAdmin):
    """Quotas change only through `reservations.quotas` (never deleted: end them)."""

    form = QuotaAdminForm
    list_display = ["team", "gpu_class", "gpus", "valid_from", "valid_until"]
    list_filter = ["gpu_class", "team"]

    def get_readonly_fields(self, request, obj=None):
        return ["team", "gpu_class", "gpus", "valid_from"] if obj is not None else []

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


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
