"""Web forms of the statement pages: they parse input; services decide."""

from decimal import Decimal

from django import forms

from gpuquota.core.timeutil import Period


def period_parse(text: str, *, now) -> Period:
    """`YYYY-MM` → that month; ValueError with a message for a bad or future month."""
    period = Period.parse_month(text.strip())
    if period.start > now:
        raise ValueError(f"{text} has not started yet.")
    return period


class AdjustmentForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=14,
        decimal_places=2,
        help_text="Signed, two decimals: negative is a credit to the team.",
        widget=forms.NumberInput(attrs={"step": "0.01"}),
    )
    reason = forms.CharField(max_length=500, widget=forms.TextInput)

    def clean_amount(self) -> Decimal:
        amount = self.cleaned_data["amount"]
        if amount == 0:
            raise forms.ValidationError("An adjustment of 0.00 changes nothing.")
        return amount
