from django import forms


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
    team = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    problems = forms.BooleanField(required=False, label="Only problems")

    def __init__(self, data, *, classes, clusters, teams):
        super().__init__(data)
        self.fields["gpu_class"].choices = [("", "All classes"),
                                            *((c.id, c.name) for c in classes)]
        self.fields["cluster"].choices = [("", "All clusters"),
                                          *((c.id, c.name) for c in clusters)]
        self.fields["team"].choices = [("", "All teams"), *((t.id, t.name) for t in teams)]
