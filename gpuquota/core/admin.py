from django import forms
from django.contrib import admin
from django.db import models

from gpuquota.core.errors import DomainError
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


class ServiceModelForm(forms.ModelForm):
    """An admin form that saves by calling a service once the form is valid (`apply`,
    returning the saved object); the service's refusals become form errors. The admin
    sets `user` per request (`ServiceAdminMixin`)."""

    user = None

    def apply(self, data: dict) -> models.Model:
        raise NotImplementedError

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:
            self.instance = self.apply(self.cleaned_data)
        except DomainError as error:
            self.add_error(error.field if error.field in self.fields else None, error.message)


class ServiceAdminMixin:
    """For a ModelAdmin whose form is a `ServiceModelForm`: the form saved already."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    def save_model(self, request, obj, form, change):
        """Saved by the service when the form was validated (`ServiceModelForm`)."""
