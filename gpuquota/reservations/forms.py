"""Web forms: they parse local times in the user's time zone; services decide."""

from datetime import UTC, datetime

from django import forms
from django.utils import timezone

from accounts.models import Team
from gpuquota.core.api_fields import MAX_YEAR, MIN_YEAR
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Gpu, GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.selectors import gpu_classes_reservable
from gpuquota.reservations.services import (
    COUNT_AT_LEAST_ONE,
    LEAD_START_TOLERANCE,
    START_IN_THE_PAST,
)

LOCAL_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")


def local_to_aware(naive: datetime, tz) -> datetime:
    """A wall-clock time in `tz` as an aware instant; refuses times that DST makes
    ambiguous (they happen twice) or missing (they never happen)."""
    first, second = naive.replace(tzinfo=tz, fold=0), naive.replace(tzinfo=tz, fold=1)
    if first.utcoffset() != second.utcoffset():
        roundtrip = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
        if roundtrip != naive:
            raise forms.ValidationError(
                f"{naive:%Y-%m-%d %H:%M} does not exist in {tz} (the clocks jump forward "
                "for daylight saving time); pick another time.", code="dst_missing")
        raise forms.ValidationError(
            f"{naive:%Y-%m-%d %H:%M} happens twice in {tz} (the clocks go back for daylight "
            "saving time); pick a time outside that hour.", code="dst_ambiguous")
    return first


# The one format of the product's dates and times, the pages' and the inputs' alike, so
# an input does not take the browser's locale (12/01/2026, 04:00 PM) beside a page that
# says 2026-12-01 16:00.
INPUT_FORMAT = "%Y-%m-%d %H:%M"
INPUT_ATTRS = {"placeholder": "YYYY-MM-DD HH:MM", "inputmode": "numeric", "autocomplete": "off",
               "pattern": r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2})?", "class": "when-input",
               "title": "A date and time like 2026-12-01 16:00, in your time zone"}


class LocalDateTimeField(forms.Field):
    """A date and time typed in the user's time zone, as the pages show them
    (`2026-12-01 16:00`)."""

    widget = forms.DateTimeInput(attrs=INPUT_ATTRS, format=INPUT_FORMAT)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, datetime):
            return value
        for fmt in LOCAL_FORMATS:
            try:
                naive = datetime.strptime(str(value).strip(), fmt)
                break
            except ValueError:
                continue
        else:
            raise forms.ValidationError("Enter a date and time like 2026-12-01 09:00.")
        if not MIN_YEAR <= naive.year <= MAX_YEAR:  # date arithmetic must never overflow
            raise forms.ValidationError(f"Give a year from {MIN_YEAR} to {MAX_YEAR}.")
        return local_to_aware(naive, timezone.get_current_timezone())

    def prepare_value(self, value):
        if isinstance(value, datetime) and value.tzinfo is not None:
            return timezone.localtime(value).strftime(INPUT_FORMAT)
        return value


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


class RateCardForm(forms.Form):
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       empty_label=None, label="GPU class")
    reserved_rate = forms.DecimalField(label="Reserved rate (per GPU-hour)", min_value=0,
                                       decimal_places=4, max_digits=12)
    on_demand_rate = forms.DecimalField(label="On-demand rate (per busy GPU-hour)",
                                        min_value=0, decimal_places=4, max_digits=12)
    borrowed_rate = forms.DecimalField(
        label="Borrowed rate (per borrowed busy GPU-hour)", min_value=0, decimal_places=4,
        max_digits=12, required=False,
        help_text="What borrowers pay for a lent GPU's busy time. Empty: the on-demand rate.")
    currency = forms.CharField(max_length=3, initial="USD")
    valid_from = LocalDateTimeField(label="From")
    valid_until = LocalDateTimeField(label="Until", required=False,
                                     help_text="Empty: until further notice.")
    reason = forms.CharField(max_length=500, required=False)


class EndForm(forms.Form):
    """When a quota row or rate card stops; empty: open-ended again."""

    at = LocalDateTimeField(label="Ends", required=False)
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
