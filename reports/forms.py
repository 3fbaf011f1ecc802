"""Web forms of the statement pages: they parse input; services decide."""

from decimal import Decimal, InvalidOperation

from django import forms

from gpuquota.core.timeutil import Period


def period_parse(text: str, *, now) -> Period:
    """`YYYY-MM` → that month; ValueError with a message for a bad or future month."""
    period = Period.parse_month(text.strip())
    if period.start > now:
        raise ValueError(f"{text} has not started yet.")
    return period


def approval_confirmation_parse(values: list[str]) -> dict[int, Decimal]:
    """The drafts an admin confirmed on the review page, `<statement id>:<total>` each
    → {id: total}; ValueError for anything else, or nothing confirmed."""
    confirmed: dict[int, Decimal] = {}
    for value in values:
        statement_id, _, total = value.partition(":")
        try:
            confirmed[int(statement_id)] = Decimal(total)
        except (ValueError, InvalidOperation) as exc:
            raise ValueError(f"Not a confirmation: {value[:40]!r}.") from exc
    if not confirmed:
        raise ValueError("Nothing was confirmed: open “Approve all”, check the count and the "
                         "total, then confirm.")
    return confirmed


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
