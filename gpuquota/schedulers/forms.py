"""The backend configuration form: the token is write-only (never rendered back)."""

import json

from django import forms

from gpuquota.schedulers.models import BackendConfig
from gpuquota.schedulers.validators import endpoint_url_validate


class BackendConfigForm(forms.Form):
    mode = forms.ChoiceField(choices=BackendConfig.Mode.choices)
    commands_dir = forms.CharField(max_length=255, required=False,
                                   help_text="Directory of the scheduler's commands; empty: PATH.")
    api_url = forms.CharField(
        required=False, max_length=200, label="REST endpoint",
        validators=[endpoint_url_validate],
        help_text="Slurm: slurmrestd's URL (http://host:6820); when set, job accounting is read "
                  "through it, and every write stays on the commands (Slurm 22.05's REST API "
                  "cannot create reservations). Kubernetes: the API server.")
    token = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                            help_text="Slurm: a JWT for the option rest_user (scontrol token), "
                                      "also given to the commands as SLURM_JWT. Stored "
                                      "encrypted, never shown. Empty: unchanged.")
    remove_token = forms.BooleanField(required=False, label="Remove the stored token")
    command_timeout_s = forms.IntegerField(min_value=1, max_value=600, initial=30,
                                           label="Command timeout (s)")
    options = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 5}),
                              help_text="A JSON object; see docs/slurm.md.")

    def clean_options(self) -> dict:
        raw = (self.cleaned_data.get("options") or "").strip() or "{}"
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("A JSON object ({...}).")
        return value

    @classmethod
    def initial_from(cls, config: BackendConfig | None) -> dict:
        if config is None:
            return {"mode": BackendConfig.Mode.OFF, "command_timeout_s": 30, "options": "{}"}
        return {"mode": config.mode, "commands_dir": config.commands_dir,
                "api_url": config.api_url, "command_timeout_s": config.command_timeout_s,
                "options": json.dumps(config.options, indent=2, sort_keys=True)}
