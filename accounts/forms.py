import zoneinfo
from datetime import datetime, time, timedelta

from django import forms

from accounts.models import User


class ProfileForm(forms.ModelForm):
    timezone = forms.ChoiceField(
        choices=[(name, name) for name in sorted(zoneinfo.available_timezones())],
        help_text="Times are shown and entered in this zone.",
    )

    class Meta:
        model = User
        fields = ["first_name", "last_name", "email", "timezone", "email_opt_out"]
        labels = {"email_opt_out": "No email from gpuquota"}
        help_texts = {
            "email_opt_out": "Stops every email to you, statements included (your team's other "
            "leads still receive them)."
        }


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=120, help_text="What will use it, e.g. “nightly CI”.")
    expires_on = forms.DateField(
        required=False, widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Optional: it stops working after this day (your time zone).")

    def expires_at(self, tz: zoneinfo.ZoneInfo) -> datetime | None:
        """The instant the token stops working: the end of the chosen local day."""
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        return datetime.combine(day + timedelta(days=1), time(), tzinfo=tz)
