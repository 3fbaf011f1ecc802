"""Each provider's page of the docs holds: the tokens it shows, sent by a loopback provider
(oidc-provider-mock) exactly as written there, and the rules it shows, saved through the
API exactly as written there, give the people the page says; the LDAP page's rules against
a real slapd holding its entries."""

import html
import json
import re
from pathlib import Path

import pytest
from django.test import Client

from accounts.models import ClusterIdentity, ExternalIdentity, Membership, User
from tests.factories import AdminFactory, ClusterFactory, TeamFactory
from tests.sso.slapd import group_of_names_ldif, slapd_missing

pytestmark = [pytest.mark.sso, pytest.mark.django_db]

DOCS = Path(__file__).resolve().parents[2] / "docs"
JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.M | re.S)
#: What the provider itself sets in every ID token (the mock sets its own).
REGISTERED = {"iss", "aud", "exp", "iat", "nbf", "auth_time", "nonce", "azp", "sub"}


def _blocks(page: str) -> list:
    return [json.loads(block) for block in JSON_BLOCK.findall((DOCS / page).read_text())]


def _rules_saved(rules: list[dict]) -> None:
    admin = Client()
    admin.force_login(AdminFactory())
    for rule in rules:
        response = admin.post("/api/v1/sso/rules", rule, content_type="application/json")
        assert response.status_code == 201, (rule, response.json())


def _teams() -> dict:
    return {slug: TeamFactory(slug=slug, name=slug.capitalize())
            for slug in ("vision", "nlp", "infra")}


def _send(provider, token: dict) -> str:
    provider.set_user(token["sub"], **{k: v for k, v in token.items() if k not in REGISTERED})
    return token["sub"]


def _current(user: User) -> set[tuple[str, str, bool]]:
    return {(m.team.slug, m.role, m.is_billing)
            for m in Membership.objects.filter(user=user, valid_until__isnull=True)}


def test_keycloak_realm_and_client_roles_and_full_group_paths(oidc_provider, settings):
    settings.GPUQUOTA_SSO_CLUSTER_USER_CLAIM = "preferred_username"
    oidc_provider.configure(name="keycloak")
    cluster = ClusterFactory(slug="hpc")
    token, rules = _blocks("sso-keycloak.md")
    _teams()
    _rules_saved(rules)

    _, response = oidc_provider.login(_send(oidc_provider, token))

    assert response.status_code == 302 and response["Location"] == "/"
    alice = User.objects.get(username="alice")
    assert alice.is_staff
    assert _current(alice) == {("vision", "lead", True), ("nlp", "member", False)}
    assert ClusterIdentity.objects.get(cluster=cluster, kind="unix_user").key == "alice"
    kept = ExternalIdentity.objects.get(user=alice).last_claims
    assert kept["realm_access"] == token["realm_access"]  # objects are kept for the preview


def test_keycloak_realm_roles_as_the_groups_claim(oidc_provider):
    oidc_provider.configure(name="keycloak", groups_claim="realm_access.roles")
    token, _ = _blocks("sso-keycloak.md")
    vision = TeamFactory(slug="vision", name="Vision")
    _rules_saved([{"position": 1, "claim": "groups", "match": "equals", "value": "gpu-admin",
                   "grant": "member", "team": vision.slug}])
    oidc_provider.login(_send(oidc_provider, token))
    assert _current(User.objects.get(username="alice")) == {("vision", "member", False)}


def test_entra_id_groups_and_app_roles_then_an_overage_keeps_and_tells(
        oidc_provider, settings, django_capture_on_commit_callbacks):
    from gpuquota.mail.models import MailDelivery

    settings.MAIL_ENABLED = True
    oidc_provider.configure(name="entra")
    token, overage, rules = _blocks("sso-entra-id.md")
    _teams()
    _rules_saved(rules)
    admin = User.objects.get(is_staff=True)

    oidc_provider.login(_send(oidc_provider, token))
    alice = User.objects.get(external_identities__subject=token["sub"])
    assert alice.is_staff and _current(alice) == {("vision", "lead", True)}

    with django_capture_on_commit_callbacks(execute=True):
        client, response = oidc_provider.login(_send(oidc_provider, overage))

    assert response.status_code == 302  # logged in, not refused
    assert alice.memberships.get(team__slug="vision").valid_until is None  # kept
    alice.refresh_from_db()
    assert alice.is_staff  # `roles` still says so
    identity = ExternalIdentity.objects.get(user=alice)
    assert "group overage" in identity.claims_unread["groups"]
    assert "_claim_sources" not in identity.last_claims  # may carry a token: never kept
    landing = html.unescape(client.get(response["Location"], follow=True).content.decode())
    assert "did not send your groups" in landing
    told = set(MailDelivery.objects.values_list("recipient__username", "template"))
    assert told == {(alice.username, "sso_claims_unread_you"),  # alice is an admin too
                    (alice.username, "sso_claims_unread"), (admin.username, "sso_claims_unread")}


def test_okta_groups_claim_and_a_claim_cut_at_its_limit(oidc_provider):
    oidc_provider.configure(name="okta", groups_max=100)
    token, rules = _blocks("sso-okta.md")
    _teams()
    _rules_saved(rules)

    oidc_provider.login(_send(oidc_provider, token))
    alice = User.objects.get(username="alice@example.org")
    assert alice.is_staff and _current(alice) == {("vision", "lead", True)}

    cut = {**token, "groups": [f"gpu-project-{n}" for n in range(100)]}
    oidc_provider.login(_send(oidc_provider, cut))
    alice.refresh_from_db()
    assert alice.is_staff and _current(alice) == {("vision", "lead", True)}
    assert "its limit" in ExternalIdentity.objects.get(user=alice).claims_unread["groups"]


@pytest.mark.skipif(bool(slapd_missing()), reason=slapd_missing() or "-")
def test_ldap_nested_groups_and_member_of(slapd, settings):
    settings.GPUQUOTA_LDAP_GROUP_TYPES = "nestedGroupOfNames,posixGroup"
    slapd.add(group_of_names_ldif("vision-interns", ["bob"]))
    slapd.add(group_of_names_ldif("gpu-users", [], groups=["vision-leads", "vision-staff"]))
    (rules,) = _blocks("sso-ldap.md")
    _teams()
    _rules_saved(rules)

    for name in ("alice", "bob"):
        response = Client().post("/accounts/login/", {"username": name,
                                                       "password": f"pw-{name}"})
        assert response.status_code == 302, html.unescape(response.content.decode())

    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    assert _current(alice) == {("vision", "lead", True), ("infra", "member", False)}
    assert _current(bob) == {("vision", "member", True), ("infra", "member", False)}
    member_of = ExternalIdentity.objects.get(user=bob).last_claims["memberOf"]
    assert sorted(member_of) == ["cn=vision-interns,ou=groups,dc=example,dc=org",
                                 "cn=vision-staff,ou=groups,dc=example,dc=org"]
