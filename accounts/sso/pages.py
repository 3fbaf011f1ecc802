"""The admins' pages of single sign-on: the mapping rules in order with the preview of
what a new or changed rule would do before it is saved, and the first logins waiting to
be linked to an existing account."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.models import IdentityLinkRequest, MappingRule, User
from accounts.permissions import require_admin
from accounts.sso.links import (
    link_candidates,
    link_request_confirm,
    link_request_refuse,
    link_requests_open,
)
from accounts.sso.rules import (
    mapping_rule_check,
    mapping_rule_warnings,
    rules_preview,
    rules_with_candidate,
)
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
    rows, warnings = None, []
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
                warnings = mapping_rule_warnings(candidate)
            except DomainError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                candidate = False
        if candidate is not False:
            user = User.objects.filter(username=data["username"]).first() \
                if data["username"] else None
            rows = rules_preview(rules=rules_with_candidate(candidate=candidate), user=user)
    return render(request, "accounts/sso_rules.html", {
        "rules": MappingRule.objects.select_related("team"), "form": form, "rows": rows,
        "warnings": warnings})


@login_required
def links_page(request):
    require_admin(request.user)
    rows = [(link, list(link_candidates(email=link.email))) for link in link_requests_open()]
    return render(request, "accounts/sso_links.html", {"rows": rows})


@login_required
@require_POST
def link_decide(request, pk: int):
    """Link the request to one of the users with its address, or refuse it."""
    require_admin(request.user)
    link = get_object_or_404(IdentityLinkRequest, pk=pk)
    try:
        if request.POST.get("decision") == "refuse":
            link_request_refuse(request=link, actor=request.user)
            messages.success(request, f"Refused: {link.provider} login of {link.email}.")
        else:
            user = get_object_or_404(User, pk=request.POST.get("user") or 0)
            link_request_confirm(request=link, user=user, actor=request.user)
            messages.success(request, f"Linked: the {link.provider} login of {link.email} is "
                             f"{user.username}'s from now on.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("sso_links")
