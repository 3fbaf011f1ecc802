from django.contrib import admin

from gpuquota.core.admin import ReadOnlyAdmin
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.usage.models import GpuHourUsage


@admin.register(GpuHourUsage)
class GpuHourUsageAdmin(ReadOnlyAdmin):
    """Read-only: rollups are recomputed from samples, never edited."""

    list_display = ["hour", "gpu", "kind", "team", "reservation", "split_ways", "failed",
                    "covered_s", "busy_s"]
    list_filter = ["kind", "failed", "gpu_class"]
    list_select_related = ["gpu", "team", "reservation"]
    date_hierarchy = "hour"
    raw_id_fields = ["gpu", "assignment", "reservation", "team"]


@admin.register(DirtyGpuHour)
class DirtyGpuHourAdmin(admin.ModelAdmin):
    list_display = ["hour", "gpu", "generation", "marked_at"]
    raw_id_fields = ["gpu"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
