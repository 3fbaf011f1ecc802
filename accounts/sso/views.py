"""The login page (provider buttons, the password form for the directory and break-glass
accounts), the OIDC login and callback, and logout that ends the provider's session too."""

from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from django.contrib import auth, messages
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET
from mozilla_django_oidc.views import OIDCAuthenticationRequestView

from accounts.sso import conf
from accounts.sso.conf import OidcProvider
from accounts.sso.discovery import oidc_discovery
from accounts.sso.errors import LoginRefused, ProviderUnreachable
from accounts.sso.forms import LoginForm

SESSION_PROVIDER = "sso_provider"
SESSION_ID_TOKEN = "oidc_id_token"  # where mozilla-django-oidc stores it (OIDC_STORE_ID_TOKEN)


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    redirect_authenticated_user = True
    form_class = LoginForm

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "oidc_providers": conf.oidc_providers(),
                "break_glass_only": bool(conf.break_glass_users()),
                "ldap_configured": conf.ldap_directory() is not None}


def _unread_said(request, label: str) -> None:
    """Tell the person whose login a rule could not read that their teams were kept."""
    outcome = getattr(request, "sso_login_outcome", None)
    if outcome is not None and outcome.unread:
        messages.warning(request, f"{label} did not send your groups in a form gpuquota can "
                         "read, so your teams were left as they were; the admins have been "
                         "told.")


def _callback_uri(request) -> str:
    return request.build_absolute_uri(reverse("oidc_callback"))


class OidcLoginView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider with state, nonce and a PKCE challenge (S256),
    kept in the session with the provider's name."""

    def __init__(self, *args, **kwargs):  # the endpoints are per provider: see get()
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.provider = None

    def get_settings(self, attr, *args):
        per_provider = {"OIDC_RP_SCOPES": self.provider.scopes, "OIDC_USE_NONCE": True,
                        "OIDC_USE_PKCE": True, "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
                        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_callback",
                        "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {}}
        if attr in per_provider:
            return per_provider[attr]
        return super().get_settings(attr, *args)

    def get(self, request, provider: str):
        self.provider = conf.oidc_provider(provider)
        if self.provider is None:
            raise Http404("No such identity provider.")
        try:
            metadata = oidc_discovery(self.provider, fresh=True)
        except ProviderUnreachable as exc:
            return provider_unavailable(request, self.provider, exc.message)
        except LoginRefused as exc:
            messages.error(request, exc.message)
            return redirect("login")
        self.OIDC_OP_AUTH_ENDPOINT = metadata["authorization_endpoint"]
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        response = super().get(request)
        state = parse_qs(urlparse(response["Location"]).query)["state"][0]
        request.session["oidc_states"][state]["provider"] = self.provider.name
        request.session.modified = True
        return response


def _refused(request, message: str):
    messages.error(request, message)
    return redirect("login")


def provider_unavailable(request, provider: OidcProvider, message: str):
    """A page of its own, 503 with Retry-After: the provider does not answer; try again,
    or log in with a password where that is allowed."""
    response = render(request, "accounts/sso_unavailable.html", {
        "provider": provider, "message": message,
        "break_glass_only": bool(conf.break_glass_users()),
        "ldap_configured": conf.ldap_directory() is not None}, status=503)
    response["Retry-After"] = "60"
    return response


@require_GET
def oidc_callback(request):
    """The provider's answer: the state must be one this browser started (once), then the
    backend verifies the code's tokens and applies the mapping rules."""
    states = request.session.get("oidc_states") or {}
    state = request.GET.get("state", "")
    entry = states.pop(state, None) if isinstance(states, dict) else None
    request.session.modified = True
    if entry is None:
        return _refused(request, "This login answer is unknown or was already used (state); "
                                 "start the login again.")
    provider = conf.oidc_provider(entry.get("provider", ""))
    if provider is None:
        return _refused(request, "The provider this login began with is no longer configured.")
    if request.GET.get("error"):
        reason = request.GET.get("error_description") or request.GET["error"]
        return _refused(request, f"{provider.label} did not log you in: {reason[:200]}")
    try:
        user = auth.authenticate(request, provider=provider, redirect_uri=_callback_uri(request),
                                 nonce=entry.get("nonce"),
                                 code_verifier=entry.get("code_verifier"))
    except ProviderUnreachable as exc:
        return provider_unavailable(request, provider, exc.message)
    except LoginRefused as exc:
        return _refused(request, exc.message)
    if user is None or not user.is_active:
        return _refused(request, f"{provider.label} did not log you in; start again.")
    id_token = request.session.get(SESSION_ID_TOKEN)
    next_url = request.session.get("oidc_login_next")
    auth.login(request, user)
    request.session[SESSION_PROVIDER] = provider.name
    request.session[SESSION_ID_TOKEN] = id_token
    _session_bound(request, id_token)
    _unread_said(request, provider.label)
    return HttpResponseRedirect(next_url or resolve_url("home"))


def _session_bound(request, id_token: str | None) -> None:
    """The session ends when the ID token does, when the setting says so."""
    if not id_token or not conf.session_follows_id_token():
        return
    # verified by the backend a moment ago: only its exp is read here
    expires = jwt.decode(id_token, options={"verify_signature": False}).get("exp")
    if isinstance(expires, int | float):
        request.session.set_expiry(max(1, int(expires - timezone.now().timestamp())))


class LogoutView(auth_views.LogoutView):
    """Ends the gpuquota session, then the provider's where it offers RP-initiated logout
    (`end_session_endpoint`)."""

    def post(self, request, *args, **kwargs):
        provider = conf.oidc_provider(request.session.get(SESSION_PROVIDER) or "")
        id_token = request.session.get(SESSION_ID_TOKEN)
        response = super().post(request, *args, **kwargs)
        if provider is None:
            return response
        try:
            end_session = oidc_discovery(provider).get("end_session_endpoint")
        except LoginRefused:
            return response
        if not end_session:
            return response
        query = {"client_id": provider.client_id,
                 "post_logout_redirect_uri": request.build_absolute_uri(reverse("login"))}
        if id_token:
            query["id_token_hint"] = id_token
        # A page that moves on, not a redirect: the policy's form-action 'self' would stop
        # the logout form's redirect to another origin.
        return render(request, "accounts/logged_out_provider.html", {
            "provider": provider, "end_session_url": f"{end_session}?{urlencode(query)}"})

