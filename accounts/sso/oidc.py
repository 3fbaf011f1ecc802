"""OpenID Connect login with mozilla-django-oidc: authorization code flow with PKCE, state
and nonce, ID tokens verified against the provider's JWKS (issuer, audience, expiry, not
before, subject), several providers from the environment, users keyed by (issuer, sub)."""

import jwt
import requests
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from accounts.sso import conf
from accounts.sso.claims import claims_with_groups
from accounts.sso.conf import OidcProvider
from accounts.sso.discovery import oidc_discovery, provider_unreachable
from accounts.sso.errors import LoginRefused
from accounts.sso.graph import claims_with_graph_groups
from accounts.sso.services import ProviderLogin, sso_login

#: What each refusal of the ID token means to the person who tried to log in.
TOKEN_REFUSALS = [
    (jwt.ExpiredSignatureError, "has expired (is this server's clock right?)"),
    (jwt.ImmatureSignatureError, "is not valid yet (is this server's clock right?)"),
    (jwt.InvalidAudienceError, "was issued for another application (audience)"),
    (jwt.InvalidIssuerError, "was issued by another issuer than the configured one"),
    (jwt.MissingRequiredClaimError, "lacks a required claim"),
    (jwt.InvalidSignatureError, "has a signature that does not verify"),
    (jwt.InvalidAlgorithmError, "is signed with an algorithm that is not allowed"),
    (jwt.InvalidTokenError, "cannot be read"),
]


class OidcBackend(OIDCAuthenticationBackend):
    """One login through `provider`; the provider comes from the state the login began
    with (accounts.sso.views), never from the callback's query."""

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()  # the endpoints are per provider: see _configure
        self.provider: OidcProvider | None = None

    def get_user(self, user_id):
        """The session's user while active (an admin's deactivation ends the session)."""
        user = self.UserModel.objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None

    def get_settings(self, attr, *args):
        per_provider = {
            "OIDC_RP_SCOPES": self.provider.scopes if self.provider else "openid",
            "OIDC_TIMEOUT": conf.oidc_timeout_s(), "OIDC_VERIFY_SSL": True,
            "OIDC_PROXY": None, "OIDC_STORE_ID_TOKEN": True, "OIDC_STORE_ACCESS_TOKEN": False,
            "OIDC_VERIFY_KID": True, "OIDC_TOKEN_USE_BASIC_AUTH": False, "OIDC_USE_NONCE": True,
        }
        if attr in per_provider:
            return per_provider[attr]
        return super().get_settings(attr, *args)

    def _configure(self, provider: OidcProvider) -> None:
        metadata = oidc_discovery(provider)
        self.provider = provider
        self.OIDC_OP_TOKEN_ENDPOINT = metadata["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = metadata.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = metadata["jwks_uri"]
        self.OIDC_RP_CLIENT_ID = provider.client_id
        self.OIDC_RP_CLIENT_SECRET = provider.client_secret
        self.OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, provider: OidcProvider | None = None, redirect_uri="",
                     nonce=None, code_verifier=None, **kwargs):
        """The user, or LoginRefused with the reason; None when this is no OIDC callback."""
        code, state = (request.GET.get("code"), request.GET.get("state")) if request else (
            None, None)
        if provider is None or not code or not state:
            return None
        self.request = request
        self._configure(provider)
        payload = {"client_id": provider.client_id, "client_secret": provider.client_secret,
                   "grant_type": "authorization_code", "code": code,
                   "redirect_uri": redirect_uri, "code_verifier": code_verifier}
        try:
            token_info = self.get_token(payload)
        except requests.HTTPError as exc:
            raise LoginRefused(f"{provider.label} refused to exchange the login code (it may "
                               "have been used already); start again.") from exc
        except requests.RequestException as exc:
            raise provider_unreachable(provider) from exc
        id_token = token_info.get("id_token")
        if not isinstance(id_token, str):
            raise LoginRefused(f"{provider.label} sent no ID token; ask an admin to check "
                               "the client's scopes (openid).")
        claims = self.verify_token(id_token, nonce=nonce)
        self.store_tokens(token_info.get("access_token"), id_token)
        return self.get_or_create_user(token_info.get("access_token"), id_token, claims)

    def verify_token(self, token, **kwargs):
        """The ID token's claims, verified: signature against the JWKS, an allowed
        algorithm, issuer, audience, exp/nbf/iat with the configured leeway, a subject,
        and the nonce of this login (a replayed token carries another one)."""
        provider = self.provider
        try:
            if jwt.get_unverified_header(token).get("alg") not in provider.algorithms:
                raise jwt.InvalidAlgorithmError("not allowed")
            key = self._signing_key(token)
            claims = jwt.decode(
                token, key, algorithms=list(provider.algorithms), audience=provider.client_id,
                issuer=provider.issuer, leeway=conf.oidc_leeway_s(),
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except requests.RequestException as exc:
            raise provider_unreachable(provider) from exc
        except jwt.PyJWTError as exc:
            reason = next(text for kind, text in TOKEN_REFUSALS if isinstance(exc, kind))
            if isinstance(exc, jwt.MissingRequiredClaimError):
                reason = f"lacks the “{exc.claim}” claim"
            raise LoginRefused(f"{provider.label}'s ID token {reason}: the login is "
                               "refused.") from exc
        except SuspiciousOperation as exc:
            raise LoginRefused(f"{provider.label}'s ID token is signed with a key it does "
                               "not publish: the login is refused.") from exc
        if not claims.get("sub") or not isinstance(claims["sub"], str):
            raise LoginRefused(f"{provider.label}'s ID token names no subject (sub).")
        if claims.get("nonce") != kwargs.get("nonce"):
            raise LoginRefused(f"{provider.label}'s ID token was not issued for this login "
                               "(nonce): it may be replayed; start again.")
        return claims

    def _signing_key(self, token: str) -> jwt.PyJWK:
        """The provider's published key for this token: the one of its `kid`, or without
        a kid the only key of its algorithm's family (some providers publish one key with
        no kid)."""
        header = jwt.get_unverified_header(token)
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=conf.oidc_timeout_s())
        response.raise_for_status()
        keys = [k for k in response.json().get("keys", []) if isinstance(k, dict)
                and k.get("use", "sig") == "sig"
                and k.get("alg", header.get("alg")) == header.get("alg")]
        if header.get("kid"):
            keys = [k for k in keys if k.get("kid") == header["kid"]]
        elif len(keys) != 1:
            keys = []
        if not keys:
            raise SuspiciousOperation("no published key fits the token")
        return jwt.PyJWK(keys[0])

    def get_or_create_user(self, access_token, id_token, payload):
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            try:
                userinfo = self.get_userinfo(access_token, id_token, payload)
            except requests.RequestException as exc:
                raise provider_unreachable(self.provider) from exc
            if userinfo.get("sub") != payload["sub"]:
                raise LoginRefused(f"{self.provider.label}'s user information is about "
                                   "someone else than its ID token: the login is refused.")
            claims = {**userinfo, **payload}  # the signed token wins
        claims = claims_with_graph_groups(claims, provider=self.provider,
                                          access_token=access_token)
        claims = claims_with_groups(claims, self.provider.groups_claim,
                                    self.provider.groups_max)
        outcome = sso_login(login=ProviderLogin(
            source="oidc", provider=self.provider.name, issuer=self.provider.issuer,
            subject=payload["sub"], claims=claims,
            username=str(claims.get("preferred_username") or ""),
            email=str(claims.get("email") or "") if claims.get("email_verified", True) else "",
            first_name=str(claims.get("given_name") or ""),
            last_name=str(claims.get("family_name") or "")))
        self.request.sso_login_outcome = outcome
        return outcome.user
