from django import forms
from django.forms.utils import flatatt
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe


class PlainSelect(forms.Select):
    """A select whose options are written in one pass, not through a template each: the
    team filter lists every team the viewer may see (2,000 at 100,000 GPUs: half a second
    of CPU through the widget's templates, issue 34)."""

    def render(self, name, value, attrs=None, renderer=None):
        chosen = "" if value is None else str(value)
        options = format_html_join("", '<option value="{}"{}>{}</option>', (
            (key, mark_safe(" selected") if str(key) == chosen else "", label)
            for key, label in self.choices))
        return format_html('<select name="{}"{}>{}</select>', name,
                           flatatt(self.build_attrs(self.attrs, attrs)), options)


class HealthRecoverForm(forms.Form):
    at = forms.DateTimeField(
        label="Recovered at", help_text="In your time zone; may lie in the past.",
        widget=forms.DateTimeInput(format="%Y-%m-%d %H:%M:%S", attrs={
            "placeholder": "YYYY-MM-DD HH:MM:SS", "class": "when-input",
            "inputmode": "numeric", "autocomplete": "off"}),
    )
    note = forms.CharField(max_length=256, required=False)


class FleetFilterForm(forms.Form):
    """The fleet page's search and filters; choices come from the page's own lists (the
    viewer's visible teams only); a bad value is a form error and that filter is ignored."""

    q = forms.CharField(required=False, max_length=100, label="Search",
                        widget=forms.TextInput(attrs={
                            "type": "search", "placeholder": "hostname, GPU UUID or team"}))
    gpu_class = forms.TypedChoiceField(required=False, coerce=int, empty_value=None,
                                       label="GPU class")
    cluster = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    health = forms.ChoiceField(required=False, choices=[
        ("", "Any health"), ("healthy", "Healthy"), ("degraded", "Degraded"),
        ("failed", "Failed")])
    reserved = forms.TypedChoiceField(
        required=False, empty_value=None, coerce=lambda v: v == "yes",
        choices=[("", "Reserved or not"), ("yes", "Reserved now"), ("no", "Unreserved now")])
    team = forms.TypedChoiceField(required=False, coerce=int, empty_value=None,
                                  widget=PlainSelect)
    problems = forms.BooleanField(required=False, label="Only problems")

    def __init__(self, data, *, classes, clusters, teams):
        super().__init__(data)
        self.fields["gpu_class"].choices = [("", "All classes"),
                                            *((c.id, c.name) for c in classes)]
        self.fields["cluster"].choices = [("", "All clusters"),
                                          *((c.id, c.name) for c in clusters)]
        self.fields["team"].choices = [("", "All teams"), *((t.id, t.name) for t in teams)]
