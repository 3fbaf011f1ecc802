from django.contrib import admin
from django.utils import timezone

from gpuquota.inventory.models import (
    Cluster,
    Gpu,
    GpuClass,
    GpuClassInterval,
    GpuHealthInterval,
    GpuModelMapping,
    GpuNodeInterval,
    MaintenanceBlock,
    Node,
)
from gpuquota.inventory.services import model_mapping_save


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ["hostname", "last_seen_at", "agent_version", "driver_version"]
    readonly_fields = ["last_seen_at", "agent_version", "driver_version"]
    show_change_link = True


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "scheduler"]
    list_filter = ["scheduler"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [NodeInline]


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "gpu_class", "model_name", "retired_at", "last_seen_at"]
    readonly_fields = fields
    show_change_link = True
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "last_seen_at", "agent_version", "driver_version"]
    list_filter = ["cluster"]
    search_fields = ["hostname"]
    readonly_fields = ["last_seen_at", "agent_version", "driver_version", "boot_id", "clock_skew_s"]
    inlines = [GpuInline]


class GpuModelMappingInline(admin.TabularInline):
    model = GpuModelMapping
    extra = 1


def _save_mapping(request, mapping: GpuModelMapping) -> None:
    model_mapping_save(mapping=mapping, actor=request.user, at=timezone.now())


@admin.register(GpuClass)
class GpuClassAdmin(admin.ModelAdmin):
    list_display = ["name", "description"]
    search_fields = ["name"]
    inlines = [GpuModelMappingInline]

    def save_formset(self, request, form, formset, change):
        for mapping in formset.save(commit=False):
            _save_mapping(request, mapping)
        for mapping in formset.deleted_objects:
            mapping.delete()


@admin.register(GpuModelMapping)
class GpuModelMappingAdmin(admin.ModelAdmin):
    """Saving a mapping moves the GPUs of that model to the class (from now on)."""

    list_display = ["model_name", "gpu_class"]
    list_filter = ["gpu_class"]
    search_fields = ["model_name"]

    def save_model(self, request, obj, form, change):
        _save_mapping(request, obj)


class IntervalInline(admin.TabularInline):
    extra = 0
    can_delete = False


class GpuNodeIntervalInline(IntervalInline):
    model = GpuNodeInterval
    fields = ["node", "valid_from", "valid_until"]


class GpuClassIntervalInline(IntervalInline):
    model = GpuClassInterval
    fields = ["gpu_class", "valid_from", "valid_until"]


class GpuHealthIntervalInline(IntervalInline):
    model = GpuHealthInterval
    fields = ["state", "valid_from", "valid_until", "reason", "closed_reason", "closed_by"]
    readonly_fields = ["closed_by"]


class MaintenanceBlockInline(IntervalInline):
    model = MaintenanceBlock
    fields = ["valid_from", "valid_until", "reason", "created_by"]
    readonly_fields = ["created_by"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = [
        "uuid",
        "node",
        "index",
        "gpu_class",
        "model_name",
        "retired_at",
        "last_seen_at",
    ]
    list_filter = ["gpu_class", "node__cluster", "retired_at"]
    search_fields = ["uuid", "node__hostname", "model_name", "pci_bus_id"]
    readonly_fields = ["uuid", "parent", "node", "gpu_class", "model_name", "last_seen_at"]
    inlines = [
        GpuNodeIntervalInline,
        GpuClassIntervalInline,
        GpuHealthIntervalInline,
        MaintenanceBlockInline,
    ]

    def has_add_permission(self, request) -> bool:
        # GPUs enrol themselves through their node's agent (with their NVML UUID).
        return False


@admin.register(GpuHealthInterval)
class GpuHealthIntervalAdmin(admin.ModelAdmin):
    list_display = ["gpu", "state", "valid_from", "valid_until", "reason"]
    list_filter = ["state"]
    search_fields = ["gpu__uuid", "reason"]
    date_hierarchy = "valid_from"


@admin.register(MaintenanceBlock)
class MaintenanceBlockAdmin(admin.ModelAdmin):
    list_display = ["gpu", "valid_from", "valid_until", "reason", "created_by"]
    search_fields = ["gpu__uuid", "reason"]
    date_hierarchy = "valid_from"
    readonly_fields = ["created_by", "created_at"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
