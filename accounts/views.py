import uuid
import zoneinfo

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.forms import ApiTokenForm, ProfileForm
from accounts.models import ApiToken
from accounts.permissions import is_admin
from accounts.selectors import api_tokens_of, teams_visible
from accounts.services import api_token_create, api_token_revoke
from gpuquota.core.attention import attention_items
from gpuquota.core.errors import DomainError
from gpuquota.core.idempotency import FORM_FIELD, KeyReused, form_submit_once
from gpuquota.core.sections import page_sections

NEW_TOKEN_SESSION_KEY = "accounts_new_api_token"


@login_required
def home(request):
    """The landing page: a member of exactly one team goes straight to it; an admin sees
    what waits for them (each app's items, `gpuquota.core.attention`), then the teams."""
    teams = list(teams_visible(user=request.user))
    if len(teams) == 1 and not request.user.is_staff:
        return redirect("team_detail", slug=teams[0].slug)
    now = timezone.now()
    attention = attention_items(now=now) if is_admin(request.user) else []
    return render(request, "accounts/home.html", {
        "teams": teams, "attention": attention,
        "attention_pending": sum(1 for item in attention if item.count),
        "sections": page_sections("home", user=request.user, now=now)})


@never_cache  # shows a new token's secret once: no browser or proxy may keep a copy
@login_required
def profile(request):
    form = ProfileForm(request.POST or None, instance=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Profile saved.")
        return redirect("profile")
    return _profile_render(request, form, ApiTokenForm())


def _profile_render(request, form, token_form, status=200, form_token=None):
    now = timezone.now()
    return render(request, "accounts/profile.html", {
        "form": form, "token_form": token_form, "tokens": api_tokens_of(user=request.user),
        "now": now, "new_token": request.session.pop(NEW_TOKEN_SESSION_KEY, None),
        "sections": page_sections("profile", user=request.user, now=now),
        FORM_FIELD: form_token,
    }, status=status)


@login_required
@require_POST
def api_token_new(request):
    """Create a personal API token; its key is shown once, on the profile page."""
    token_form = ApiTokenForm(request.POST)
    if token_form.is_valid():
        try:
            done = form_submit_once(request, lambda: _token_create(request, token_form))
        except KeyReused:
            token_form.add_error(None, "This form was already sent with other values; it has "
                                 "been renewed: check it and send it again.")
            return _profile_render(request, ProfileForm(instance=request.user), token_form,
                                   status=400, form_token=uuid.uuid4().hex)
        if done is not None:
            return done
    return _profile_render(request, ProfileForm(instance=request.user), token_form, status=400)


def _token_create(request, token_form):
    """The token of a valid form (its key kept in the session to be shown once) and the
    redirect to the profile; None with the refusal on the form."""
    try:
        token, key = api_token_create(
            user=request.user, name=token_form.cleaned_data["name"],
            expires_at=token_form.expires_at(zoneinfo.ZoneInfo(request.user.timezone)))
    except DomainError as exc:
        field = "expires_on" if exc.field == "expires_at" else exc.field
        token_form.add_error(field if field in token_form.fields else None, exc.message)
        return None
    request.session[NEW_TOKEN_SESSION_KEY] = {"name": token.name, "key": key}
    messages.success(request, f"Token “{token.name}” created.")
    return redirect("profile")


@login_required
@require_POST
def api_token_revoke_view(request, pk: int):
    """Revoke one of the user's own tokens (admins revoke others' in the admin)."""
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    api_token_revoke(token=token, actor=request.user)
    messages.success(request, f"Token “{token.name}” ({token.prefix}…) revoked.")
    return redirect("profile")
