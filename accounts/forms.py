import zoneinfo
from datetime import datetime, time, timedelta

from django import forms

from accounts.models import User

# The IANA regions of real places: what a person picks their zone from. Left out: the
# system's own aliases (`localtime`, `posixrules`, `Factory`), the deprecated country
# links (`US/Pacific`, `GB`...) and the POSIX-style `Etc/GMT+5` ones, whose sign is
# inverted; `UTC` is offered on its own.
REGIONS = ("Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia",
           "Europe", "Indian", "Pacific")


def timezone_choices(current: str | None = None) -> list:
    """UTC, then every zone of a region, grouped by region (a user's current zone stays
    offered even if it is one of the names left out, so their profile still saves)."""
    zones = zoneinfo.available_timezones()
    grouped = [(region, [(name, name.replace("_", " ")) for name in sorted(zones)
                         if name.startswith(f"{region}/")])
               for region in REGIONS]
    offered = {"UTC"} | {name for _region, names in grouped for name, _label in names}
    extra = [(current, current)] if current and current in zones - offered else []
    return [("UTC", "UTC"), *extra, *[(region, names) for region, names in grouped if names]]


class ProfileForm(forms.ModelForm):
    timezone = forms.ChoiceField(help_text="Times are shown and entered in this zone.")

    class Meta:
        model = User
        fields = ["first_name", "last_name", "email", "timezone", "email_opt_out"]
        labels = {"email_opt_out": "No email from gpuquota"}
        help_texts = {
            "email_opt_out": "Stops every email to you, statements included (your team's other "
            "leads still receive them)."
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["timezone"].choices = timezone_choices(self.instance.timezone)


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=120, help_text="What will use it, e.g. “nightly CI”.")
    # Typed as the pages write dates (2027-01-31), not the browser's date picker, whose
    # format follows the browser's locale (01/31/2027) beside pages that say 2027-01-31.
    expires_on = forms.DateField(
        required=False, input_formats=["%Y-%m-%d"],
        widget=forms.DateInput(format="%Y-%m-%d", attrs={
            "placeholder": "YYYY-MM-DD", "inputmode": "numeric", "autocomplete": "off",
            "pattern": r"\d{4}-\d{2}-\d{2}", "class": "when-input",
            "title": "A date like 2027-01-31"}),
        error_messages={"invalid": "Enter a date like 2027-01-31."},
        help_text="Optional: it stops working after this day (your time zone).")

    def expires_at(self, tz: zoneinfo.ZoneInfo) -> datetime | None:
        """The instant the token stops working: the end of the chosen local day."""
        day = self.cleaned_data.get("expires_on")
        if day is None:
            return None
        return datetime.combine(day + timedelta(days=1), time(), tzinfo=tz)
