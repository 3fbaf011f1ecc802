"""A provider's OpenID Connect discovery document, fetched from its issuer and cached."""

import requests
from django.core.cache import cache

from accounts.sso import conf
from accounts.sso.conf import OidcProvider
from accounts.sso.errors import LoginRefused, ProviderUnreachable

CACHE_S = 3600
REQUIRED = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")


def provider_unreachable(provider: OidcProvider) -> ProviderUnreachable:
    return ProviderUnreachable(f"{provider.label} does not answer right now, so logging in through "
                        "it is not possible; try again later (break-glass accounts can still "
                        "log in with a password).")


def oidc_discovery(provider: OidcProvider, *, fresh: bool = False) -> dict:
    """The provider's metadata (`<issuer>/.well-known/openid-configuration`), whose
    `issuer` must be the configured one exactly; cached an hour. `fresh` asks the provider
    again (a login starting: a provider that stopped answering is said so, rather than
    the browser sent to it)."""
    key = f"sso:discovery:{provider.name}:{provider.issuer}"
    found = None if fresh else cache.get(key)
    if found is not None:
        return found
    try:
        response = requests.get(f"{provider.issuer}/.well-known/openid-configuration",
                                timeout=conf.oidc_timeout_s())
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise provider_unreachable(provider) from exc
    if not isinstance(document, dict) or any(not document.get(k) for k in REQUIRED):
        raise LoginRefused(f"{provider.label}'s discovery document lacks an endpoint; ask "
                           "an admin to check its issuer URL.")
    if str(document["issuer"]).rstrip("/") != provider.issuer:
        raise LoginRefused(f"{provider.label} says its issuer is {document['issuer']!r}, not "
                           f"the configured {provider.issuer!r}: the login is refused.")
    cache.set(key, document, CACHE_S)
    return document
