"""The admins' page of the mapping rules: the rules in order and the preview of what a
new or changed rule would do, before it is saved."""

from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from accounts.models import MappingRule, User
from accounts.permissions import require_admin
from accounts.sso.rules import mapping_rule_check, rules_preview, rules_with_candidate
from gpuquota.core.errors import DomainError


class PreviewForm(forms.ModelForm):
    """A candidate rule (optional) and whom to preview it for."""

    rule = forms.ModelChoiceField(MappingRule.objects.all(), required=False,
                                  help_text="Change this saved rule; empty: a new rule.")
    with_candidate = forms.BooleanField(required=False, initial=True,
                                        label="Preview with this rule")
    username = forms.CharField(required=False, label="User",
                               help_text="Empty: everyone who logged in in the last 30 days.")

    class Meta:
        model = MappingRule
        fields = ["position", "provider", "claim", "match", "value", "grant", "team",
                  "is_billing"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("position", "value", "grant"):
            self.fields[name].required = False

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        if name and not User.objects.filter(username=name).exists():
            raise forms.ValidationError(f"No user named “{name}”.")
        return name


@login_required
def rules_preview_page(request):
    require_admin(request.user)
    form = PreviewForm(request.GET or None)
    rows = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        candidate = None
        if data["with_candidate"] and data["value"]:
            candidate = data["rule"] or MappingRule()
            for name in PreviewForm.Meta.fields:
                setattr(candidate, name, data[name] if data[name] is not None else
                        getattr(candidate, name))
            candidate.position = candidate.position or 0
            try:
                mapping_rule_check(candidate)
            except DomainError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                candidate = False
        if candidate is not False:
            user = User.objects.filter(username=data["username"]).first() \
                if data["username"] else None
            rows = rules_preview(rules=rules_with_candidate(candidate=candidate), user=user)
    return render(request, "accounts/sso_rules.html", {
        "rules": MappingRule.objects.select_related("team"), "form": form, "rows": rows})
