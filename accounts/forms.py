import zoneinfo

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
