"""The admin of GPU health intervals (inventory's model), next to the services that
record and recover them from events and samples (`gpuquota.ingest.health`)."""

from django.contrib import admin

from gpuquota.core.admin import ServiceAdminMixin, ServiceModelForm
from gpuquota.core.errors import DomainError
from gpuquota.ingest.health import gpu_health_interval_record, gpu_health_recover
from gpuquota.inventory.models import GpuHealthInterval


class GpuHealthIntervalForm(ServiceModelForm):
    """Adding records an interval (`gpu_health_interval_record`); changing sets when it
    ended, as an admin's recovery (`gpu_health_recover`, `closed_reason` its note)."""

    class Meta:
        model = GpuHealthInterval
        fields = ["gpu", "state", "valid_from", "valid_until", "reason", "closed_reason"]

    def apply(self, data: dict) -> GpuHealthInterval:
        if self.instance._state.adding:
            return gpu_health_interval_record(
                gpu=data["gpu"], state=data["state"], valid_from=data["valid_from"],
                valid_until=data.get("valid_until"), reason=data.get("reason", ""),
                by=self.user)
        interval = GpuHealthInterval.objects.get(pk=self.instance.pk)
        at = data.get("valid_until")
        if at == interval.valid_until:
            return interval
        if at is None:
            raise DomainError("A recovered interval cannot be reopened.", field="valid_until")
        return gpu_health_recover(gpu=interval.gpu, at=at, by=self.user,
                                  note=data.get("closed_reason", ""))


@admin.register(GpuHealthInterval)
class GpuHealthIntervalAdmin(ServiceAdminMixin, admin.ModelAdmin):
    form = GpuHealthIntervalForm
    list_display = ["gpu", "state", "valid_from", "valid_until", "reason"]
    list_filter = ["state"]
    search_fields = ["gpu__uuid", "reason"]
    date_hierarchy = "valid_from"

    def get_readonly_fields(self, request, obj=None):
        return ["gpu", "state", "valid_from", "reason", "boot_id", "closed_by"] if obj else []

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
