"""Web forms: they parse local times in the user's time zone; services decide."""

from django import forms
from django.utils import timezone

from accounts.models import Team
from gpuquota.core.forms import LocalDateTimeField
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.selectors import gpu_classes_reservable
from gpuquota.reservations.services import (
    COUNT_AT_LEAST_ONE,
    LEAD_START_TOLERANCE,
    START_IN_THE_PAST,
)


class ReservationForm(forms.Form):
    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    gpu_class = forms.ModelChoiceField(queryset=None, empty_label=None, label="GPU class")
    count = forms.IntegerField(label="GPUs", initial=1, min_value=1,
                               error_messages={"min_value": COUNT_AT_LEAST_ONE})
    start = LocalDateTimeField()
    end = LocalDateTimeField()
    placement = forms.ChoiceField(choices=Reservation.Placement.choices,
                                  initial=Reservation.Placement.ANY)
    purpose = forms.CharField(max_length=256, required=False,
                              widget=forms.TextInput(attrs={"placeholder": "What is it for?"}))

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        self.fields["gpu_class"].queryset = gpu_classes_reservable()


class ExtendForm(forms.Form):
    end = LocalDateTimeField(label="New end")


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(max_length=2000, required=False)


class MaintenanceForm(forms.Form):
    gpu = forms.ModelChoiceField(queryset=None, label="GPU")
    start = LocalDateTimeField()
    end = LocalDateTimeField(required=False, help_text="Empty: until further notice.")
    reason = forms.CharField(max_length=256)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu"].queryset = Gpu.objects.filter(
            parent__isnull=True, retired_at__isnull=True).select_related("node", "gpu_class")
        self.fields["gpu"].label_from_instance = (
            lambda g: f"{g.node.hostname} / GPU {g.index} · {g.gpu_class} · {g.uuid[:12]}…")


class WindowCheckForm(forms.Form):
    """The reservation form's live check: a class and a local window; with a team (one
    the user leads) and a count, what submitting would do."""

    gpu_class = forms.ModelChoiceField(queryset=None)
    start = LocalDateTimeField()
    end = LocalDateTimeField()
    team = forms.ModelChoiceField(queryset=None, required=False, to_field_name="pk")
    count = forms.IntegerField(required=False, min_value=1, max_value=100_000,
                               error_messages={"min_value": COUNT_AT_LEAST_ONE})
    placement = forms.ChoiceField(choices=Reservation.Placement.choices, required=False)
    #: The admins' back-fill form, whose windows may lie in the past.
    backfill = forms.BooleanField(required=False)

    def __init__(self, *args, teams=None, may_backfill=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu_class"].queryset = gpu_classes_reservable()
        self.fields["team"].queryset = teams if teams is not None else Team.objects.none()
        if not may_backfill:
            self.fields.pop("backfill")

    def clean(self):
        data = super().clean()
        if data.get("start") and data.get("end") and data["end"] <= data["start"]:
            self.add_error("end", "The end must be after the start.")
        if (data.get("start") and not data.get("backfill")
                and data["start"] < timezone.now() - LEAD_START_TOLERANCE):
            self.add_error("start", START_IN_THE_PAST)
        return data


class QuotaForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("name"), empty_label=None)
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       empty_label=None, label="GPU class")
    gpus = forms.IntegerField(label="GPUs guaranteed", min_value=0)
    valid_from = LocalDateTimeField(label="From")
    valid_until = LocalDateTimeField(label="Until", required=False,
                                     help_text="Empty: until further notice.")
    reason = forms.CharField(max_length=500, required=False)


class ListFilterForm(forms.Form):
    """Filters of the admins' lists; every field optional, bad values are form errors."""

    team = forms.ModelChoiceField(queryset=Team.objects.order_by("name"), required=False,
                                  to_field_name="slug", empty_label="All teams")
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       required=False, to_field_name="name",
                                       empty_label="All classes", label="GPU class")
    status = forms.ChoiceField(choices=[("", "Any status"), *Reservation.Status.choices],
                               required=False)
    month = forms.CharField(required=False, widget=forms.TextInput(
        attrs={"type": "month"}), help_text="Reservations overlapping this month (UTC).")

    def clean_month(self):
        text = self.cleaned_data["month"]
        if not text:
            return None
        try:
            return Period.parse_month(text)
        except ValueError:
            raise forms.ValidationError("Pick a month as YYYY-MM.") from None
