"""Django admin: quotas are edited here; reservations are read-only here (every
change goes through the services, which check capacity and write the audit log)."""

from django import forms
from django.contrib import admin

from gpuquota.reservations.models import Assignment, Quota, Reservation
from gpuquota.reservations.selectors import quotas_overlapping


class QuotaAdminForm(forms.ModelForm):
    """Refuses a row overlapping another of its team and class on every database (the
    exclusion constraint only exists on PostgreSQL)."""

    class Meta:
        model = Quota
        fields = ["team", "gpu_class", "gpus", "valid_from", "valid_until"]

    def clean(self):
        data = super().clean()
        team, gpu_class, start = data.get("team"), data.get("gpu_class"), data.get("valid_from")
        if team and gpu_class and start and quotas_overlapping(
            team=team, gpu_class=gpu_class, start=start, end=data.get("valid_until"),
            exclude_pk=self.instance.pk,
        ).exists():
            raise forms.ValidationError("Quota rows of one team and class cannot overlap.")
        return data


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaAdminForm
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
