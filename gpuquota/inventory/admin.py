from django import forms
from django.contrib import admin
from django.utils import timezone

from gpuquota.core.admin import ServiceAdminMixin, ServiceModelForm
from gpuquota.inventory.history import gpu_class_change, gpu_node_change, gpu_service_change
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
from gpuquota.inventory.services import model_mapping_delete, model_mapping_save


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
            model_mapping_delete(mapping=mapping, actor=request.user, at=timezone.now())


@admin.register(GpuModelMapping)
class GpuModelMappingAdmin(admin.ModelAdmin):
    """Saving a mapping moves the GPUs of that model to the class (from now on)."""

    list_display = ["model_name", "gpu_class"]
    list_filter = ["gpu_class"]
    search_fields = ["model_name"]

    def save_model(self, request, obj, form, change):
        _save_mapping(request, obj)

    def delete_model(self, request, obj):
        model_mapping_delete(mapping=obj, actor=request.user, at=timezone.now())

    def delete_queryset(self, request, queryset):
        for mapping in queryset:
            self.delete_model(request, mapping)


class IntervalInline(admin.TabularInline):
    """History, shown only: it changes through audited services (the GPU form's class and
    node changes, the health interval admin), which mark what they re-attribute."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


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


class MaintenanceBlockInline(admin.TabularInline):
    model = MaintenanceBlock
    extra = 0
    can_delete = False
    fields = ["valid_from", "valid_until", "reason", "created_by"]
    readonly_fields = ["created_by"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class GpuForm(ServiceModelForm):
    """The GPU's descriptive fields; its service interval and a change of class or node
    from an instant, each through its audited service (`inventory.history`)."""

    new_class = forms.ModelChoiceField(GpuClass.objects.all(), required=False,
                                       label="Change class to")
    new_node = forms.ModelChoiceField(Node.objects.all(), required=False,
                                      label="Record a move to node")
    change_at = forms.SplitDateTimeField(required=False, label="Change from (UTC)",
                                         help_text="Defaults to now; may lie in the past.")
    change_reason = forms.CharField(required=False, max_length=256)

    class Meta:
        model = Gpu
        fields = ["index", "pci_bus_id", "memory_total_bytes", "power_limit_w",
                  "commissioned_at", "retired_at"]

    def apply(self, data: dict) -> Gpu:
        reason = data.get("change_reason", "")
        gpu = Gpu.objects.get(pk=self.instance.pk)
        for name in ("index", "pci_bus_id", "memory_total_bytes", "power_limit_w"):
            setattr(gpu, name, data.get(name))
        gpu.save(update_fields=["index", "pci_bus_id", "memory_total_bytes", "power_limit_w"])
        gpu = gpu_service_change(gpu=gpu, commissioned_at=data["commissioned_at"],
                                 retired_at=data.get("retired_at"), by=self.user, reason=reason)
        at = data.get("change_at") or timezone.now()
        if data.get("new_class") is not None:
            gpu = gpu_class_change(gpu=gpu, gpu_class=data["new_class"], at=at, by=self.user,
                                   reason=reason)
        if data.get("new_node") is not None:
            gpu = gpu_node_change(gpu=gpu, node=data["new_node"], at=at, by=self.user,
                                  reason=reason)
        return gpu


@admin.register(Gpu)
class GpuAdmin(ServiceAdminMixin, admin.ModelAdmin):
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
    form = GpuForm
    readonly_fields = ["uuid", "parent", "node", "gpu_class", "model_name", "last_seen_at"]
    fieldsets = [
        (None, {"fields": ["uuid", "parent", "node", "gpu_class", "model_name", "index",
                           "pci_bus_id", "memory_total_bytes", "power_limit_w",
                           "commissioned_at", "retired_at", "last_seen_at"]}),
        ("Change of history (audited, recomputed)",
         {"fields": ["new_class", "new_node", "change_at", "change_reason"]}),
    ]
    inlines = [
        GpuNodeIntervalInline,
        GpuClassIntervalInline,
        GpuHealthIntervalInline,
        MaintenanceBlockInline,
    ]

    def has_add_permission(self, request) -> bool:
        # GPUs enrol themselves through their node's agent (with their NVML UUID).
        return False


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
