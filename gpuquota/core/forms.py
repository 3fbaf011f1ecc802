"""Form fields every page shares: a date and time typed in the user's time zone, in the
one format the pages show."""

from datetime import UTC, datetime

from django import forms
from django.utils import timezone

from gpuquota.core.api_fields import MAX_YEAR, MIN_YEAR

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


class EndForm(forms.Form):
    """When a row of a history (a quota row, a rate card) stops; empty: open-ended again."""

    at = LocalDateTimeField(label="Ends", required=False)
    reason = forms.CharField(max_length=500, required=False)
