"""The source form of the admin pages: the secret is write-only (blank keeps it)."""

from django import forms

from gpuquota.telemetry.models import TelemetrySource

FIELDS = ["name", "cluster", "kind", "enabled", "urls", "base_url", "selector", "auth",
          "username", "tls_verify", "ca_bundle", "node_label", "interval_s",
          "scrape_interval_s", "window_s", "delay_s"]


class SourceForm(forms.ModelForm):
    secret = forms.CharField(
        required=False, strip=False, widget=forms.PasswordInput(render_value=False),
        help_text="Password or bearer token; stored encrypted, never shown again. Blank "
                  "keeps the stored one.")
    secret_remove = forms.BooleanField(required=False, label="Remove the stored secret")
    base_url = forms.URLField(required=False, max_length=500, assume_scheme="https",
                              help_text="The query API's root, e.g. http://prometheus:9090")

    class Meta:
        model = TelemetrySource
        fields = FIELDS
        widgets = {"urls": forms.Textarea(attrs={"rows": 3})}

    def secret_value(self) -> str | None:
        """The new secret, "" to remove it, None to keep the stored one."""
        if self.cleaned_data.get("secret_remove"):
            return ""
        return self.cleaned_data.get("secret") or None
