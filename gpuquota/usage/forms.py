from django import forms


class HealthRecoverForm(forms.Form):
    at = forms.DateTimeField(
        label="Recovered at", help_text="In your time zone; may lie in the past.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    note = forms.CharField(max_length=256, required=False)
