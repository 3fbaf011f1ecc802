"""Web forms of the reclaim pages: they parse input (local times in the user's time
zone); the services in `lifecycle.py` and `services.py` decide."""

from datetime import timedelta
from decimal import Decimal

from django import forms

from accounts.models import Team
from gpuquota.core.forms import LocalDateTimeField
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from reclaim.conf import RULES

REASON_MAX = 2000


class ReasonForm(forms.Form):
    """A reason for a decision (uphold, withdraw): optional."""

    reason = forms.CharField(required=False, max_length=REASON_MAX, strip=True)


class ObjectForm(forms.Form):
    """A lead's objection: the reason is required."""

    reason = forms.CharField(max_length=REASON_MAX, strip=True,
                             error_messages={"required": "Say why the GPUs are still needed."})


class DismissForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX, strip=True,
                             error_messages={"required": "Give a reason for dismissing."})
    snooze_days = forms.DecimalField(
        label="Snooze (days)", min_value=Decimal(0), max_value=Decimal(366), decimal_places=2,
        required=False, help_text="Empty: the policy's default snooze.")

    def snooze(self) -> timedelta | None:
        days = self.cleaned_data.get("snooze_days")
        return None if days is None else timedelta(seconds=int(days * 86400))


class BulkAcceptForm(forms.Form):
    ids = forms.TypedMultipleChoiceField(coerce=int, choices=(), error_messages={
        "required": "Tick at least one recommendation to accept.",
        "invalid_choice": "Recommendation %(value)s is not open any more."})

    def __init__(self, *args, open_ids: list[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["ids"].choices = [(i, str(i)) for i in open_ids]


class ExemptionForm(forms.Form):
    """A reservation (by number) or a team and class, a reason and an end."""

    reservation = forms.IntegerField(required=False, min_value=1, label="Reservation #")
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("name"), required=False)
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       required=False, label="GPU class")
    reason = forms.CharField(max_length=REASON_MAX, strip=True,
                             error_messages={"required": "Say why it must not be reclaimed."})
    until = LocalDateTimeField(label="Until")

    def clean_reservation(self):
        number = self.cleaned_data.get("reservation")
        if number is None:
            return None
        reservation = Reservation.objects.select_related("team").filter(pk=number).first()
        if reservation is None:
            raise forms.ValidationError(f"There is no reservation #{number}.")
        return reservation


class BacktestForm(forms.Form):
    """'If this policy had run over the last N days', with thresholds to try."""

    days = forms.IntegerField(min_value=1, max_value=90, initial=14, label="Last N days")
    idle_busy_fraction = forms.DecimalField(
        min_value=Decimal(0), max_value=Decimal(1), decimal_places=4, required=False,
        label="Idle below busy fraction")
    min_coverage = forms.DecimalField(min_value=Decimal(0), max_value=Decimal(1),
                                      decimal_places=4, required=False, label="Minimum coverage")
    lookback_hours = forms.IntegerField(min_value=1, max_value=24 * 14, required=False,
                                        label="Look-back (hours)")
    rule = forms.ChoiceField(choices=[("", "The rule in force"), *[(r, r) for r in RULES]],
                             required=False, label="Rule")
