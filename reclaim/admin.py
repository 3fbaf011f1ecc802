"""Read-only Django admin lists of reclaim: every change goes through the services
(the review page and the API call them), so nothing is added, changed or deleted here."""

from django.contrib import admin

from reclaim.models import Exemption, Recommendation, RecommendationGpu


class _ReadOnly:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class RecommendationGpuInline(_ReadOnly, admin.TabularInline):
    model = RecommendationGpu
    fields = ["gpu", "state", "released_at", "note"]
    readonly_fields = fields
    extra = 0


@admin.register(Recommendation)
class RecommendationAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ["id", "reservation", "kind", "status", "over_quota", "savings", "currency",
                    "created_at", "grace_until", "updated_at"]
    list_filter = ["kind", "status", "over_quota"]
    search_fields = ["reservation__team__slug", "reservation__id"]
    list_select_related = ["reservation__team", "reservation__gpu_class"]
    readonly_fields = [f.name for f in Recommendation._meta.fields]
    inlines = [RecommendationGpuInline]


@admin.register(Exemption)
class ExemptionAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ["id", "reservation", "team", "gpu_class", "until", "created_by", "reason"]
    search_fields = ["reason", "team__slug"]
    list_select_related = ["reservation__team", "team", "gpu_class", "created_by"]
    readonly_fields = [f.name for f in Exemption._meta.fields]
