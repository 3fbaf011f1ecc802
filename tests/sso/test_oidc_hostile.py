"""Hostile and broken OpenID Connect answers: each refused with a clear message on the
login page, and no account created or changed."""

import html
import time
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from accounts.models import ExternalIdentity, MappingRule, Membership, User
from accounts.sso.conf import OidcProvider
from tests.factories import TeamFactory
from tests.sso.hostile import HostileProvider, rsa_key

pytestmark = [pytest.mark.sso, pytest.mark.django_db]


@pytest.fixture
def hostile(settings):
    with HostileProvider() as provider:
        settings.GPUQUOTA_OIDC_PROVIDERS = [OidcProvider(
            name="hostile", label="Hostile SSO", issuer=provider.url,
            client_id=provider.client_id, client_secret="s")]
        yield provider


def _begin(client: Client) -> tuple[str, str]:
    response = client.get("/accounts/oidc/hostile/login/")
    assert response.status_code == 302, response
    query = parse_qs(urlparse(response["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    return query["state"][0], query["nonce"][0]


def _answer(client: Client, state: str) -> str:
    response = client.get(f"/accounts/oidc/callback/?code=c0de&state={state}")
    assert response.status_code == 302
    if response["Location"] != "/accounts/login/":
        return "LOGGED IN"
    return html.unescape(client.get("/accounts/login/").content.decode())


def test_a_good_token_logs_in_which_proves_the_refusals_below_are_the_tokens(hostile):
    vision = TeamFactory(slug="vision", name="Vision")
    MappingRule.objects.create(position=1, value="vision", grant="member", team=vision)
    client = Client()
    state, nonce = _begin(client)
    hostile.id_token = hostile.sign(hostile.claims(nonce))
    assert _answer(client, state) == "LOGGED IN"
    user = User.objects.get(external_identities__issuer=hostile.url,
                            external_identities__subject="s-1")
    assert Membership.objects.get(user=user).team == vision
    assert 0 < client.session.get_expiry_age() <= 300  # no longer than the ID token
    assert client.get("/api/v1/me").status_code == 200
    User.objects.filter(pk=user.pk).update(is_active=False)  # an admin deactivates them
    assert client.get("/api/v1/me").status_code in (401, 403)


#: The changes of each case to a good token; times are given from the test's own now (a
#: now read when the module is collected would be minutes old when the case runs).
CASES = {
    "wrong issuer": ({"iss": "https://evil.example.org"}, {}, "another issuer"),
    "expired": (lambda now: {"iat": now - 7200, "exp": now - 3600}, {}, "has expired"),
    "not yet valid": (lambda now: {"nbf": now + 3600}, {}, "is not valid yet"),
    "issued in the future": (lambda now: {"iat": now + 3600, "exp": now + 7200}, {},
                             "is not valid yet"),
    "bad signature": ({}, {"key": "other"}, "signature that does not verify"),
    "unknown key": ({}, {"kid": "k2"}, "key it does not publish"),
    "symmetric algorithm": ({}, {"alg": "HS256"}, "algorithm that is not allowed"),
    "wrong audience": ({"aud": "someone-else"}, {}, "another application"),
    "replayed nonce": ({"nonce": "a-nonce-of-another-login"}, {}, "not issued for this login"),
    "missing subject": ({"sub": None}, {}, "lacks the “sub” claim"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_token_is_refused_with_a_message_and_creates_nothing(hostile, case):
    changes, signing, message = CASES[case]
    client = Client()
    state, nonce = _begin(client)
    claims = hostile.claims(nonce, changes(int(time.time())) if callable(changes) else changes)
    if signing.get("key") == "other":
        signing = {**signing, "key": rsa_key()}
    if signing.get("alg") == "HS256":
        signing = {**signing, "key": "a-shared-secret-of-thirty-two-bytes!"}
    hostile.id_token = hostile.sign(claims, **signing)

    page = _answer(client, state)

    assert message in page
    assert not User.objects.exists() and not ExternalIdentity.objects.exists()


def test_a_replayed_state_is_refused(hostile):
    client = Client()
    state, nonce = _begin(client)
    hostile.id_token = hostile.sign(hostile.claims(nonce))
    assert _answer(client, state) == "LOGGED IN"
    client.post("/accounts/logout/")
    assert "unknown or was already used" in _answer(client, state)
    assert "unknown or was already used" in _answer(Client(), state)  # another browser


def test_a_discovery_document_claiming_another_issuer_is_refused(hostile):
    hostile.claimed_issuer = "https://evil.example.org"
    client = Client()
    response = client.get("/accounts/oidc/hostile/login/")
    assert response["Location"] == "/accounts/login/"
    page = html.unescape(client.get("/accounts/login/").content.decode())
    assert "says its issuer is 'https://evil.example.org'" in page


def test_the_provider_refusing_the_login_is_said_so(hostile):
    client = Client()
    state, _ = _begin(client)
    response = client.get(f"/accounts/oidc/callback/?error=access_denied&state={state}"
                          "&error_description=Denied+by+policy")
    assert response["Location"] == "/accounts/login/"
    assert "did not log you in: Denied by policy" in html.unescape(
        client.get("/accounts/login/").content.decode())
    assert not User.objects.exists()


def test_an_existing_user_is_not_changed_by_a_refused_login(hostile):
    client = Client()
    state, nonce = _begin(client)
    hostile.id_token = hostile.sign(hostile.claims(nonce, {"email": "m@example.org"}))
    assert _answer(client, state) == "LOGGED IN"
    client = Client()
    state, nonce = _begin(client)
    hostile.id_token = hostile.sign(hostile.claims(nonce, {"email": "new@example.org",
                                                           "aud": "someone-else"}))
    assert "another application" in _answer(client, state)
    assert User.objects.get().email == "m@example.org"
