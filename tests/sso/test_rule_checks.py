"""No rule can lock everyone out silently: a rule on a claim that is not names is refused
when saved (with the paths inside it), one saved before any login carried that claim
refuses nobody (what it decides is kept, and said), the API names the match kinds it
accepts, and the preview replays the last logins' real claims, objects included."""

import html

import pytest
from django.test import Client

from accounts.models import ExternalIdentity, MappingRule, Membership, User
from gpuquota.core.models import AuditEntry
from tests.factories import AdminFactory, TeamFactory

pytestmark = [pytest.mark.sso, pytest.mark.django_db]

KEYCLOAK_ALICE = {"preferred_username": "alice", "email": "alice@example.org",
                  "email_verified": True,
                  "realm_access": {"roles": ["default-roles-example", "gpu-user"]},
                  "resource_access": {"gpuquota": {"roles": ["vision-lead"]}}}
RULE = {"position": 10, "claim": "realm_access.roles", "match": "equals", "value": "gpu-user",
        "grant": "member", "team": "vision"}


def _admin() -> Client:
    client = Client()
    client.force_login(AdminFactory())
    return client


def _post_rule(client: Client, **changes):
    return client.post("/api/v1/sso/rules", {**RULE, **changes},
                       content_type="application/json")


def test_a_rule_on_an_object_claim_is_refused_at_save_naming_the_paths_inside(oidc_provider):
    TeamFactory(slug="vision", name="Vision")
    oidc_provider.set_user("kc-alice", **KEYCLOAK_ALICE)
    oidc_provider.login("kc-alice")
    admin = _admin()

    refused = _post_rule(admin, claim="realm_access")

    assert refused.status_code == 400
    error = refused.json()["errors"][0]
    assert error["field"] == "claim"
    assert "“realm_access” is an object" in error["message"]
    assert "“realm_access.roles”" in error["message"]
    assert "in logins of the last 30 days" in error["message"]
    assert _post_rule(admin).status_code == 201
    assert MappingRule.objects.count() == 1


def test_the_api_names_the_match_kinds_and_grants_it_accepts():
    TeamFactory(slug="vision")
    admin = _admin()
    refused = _post_rule(admin, match="pattern").json()["errors"][0]
    assert refused["field"] == "match"
    assert refused["message"] == "“pattern” is not one of equals, glob, regex."
    refused = _post_rule(admin, grant="owner").json()["errors"][0]
    assert refused["message"] == "“owner” is not one of admin, lead, member."


def test_a_rule_on_an_object_claim_saved_before_any_login_locks_nobody_out(oidc_provider):
    """The issue's lock-out: such a rule refused every Keycloak user's login. Now each logs
    in; what the rule decides is kept as it was and said; the next rule still applies."""
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    MappingRule.objects.create(position=1, claim="realm_access.roles", value="gpu-user",
                               grant="member", team=vision)
    MappingRule.objects.create(position=2, claim="resource_access.gpuquota.roles",
                               value="vision-lead", grant="member", team=nlp)
    oidc_provider.set_user("kc-alice", **KEYCLOAK_ALICE)
    oidc_provider.login("kc-alice")
    alice = User.objects.get(username="alice")
    assert {m.team.slug for m in Membership.objects.filter(user=alice)} == {"vision", "nlp"}
    # saved before any login carried it (the save check had nothing to read)
    MappingRule.objects.filter(position=1).update(claim="realm_access")

    _, response = oidc_provider.login("kc-alice")

    assert response.status_code == 302 and response["Location"] == "/"
    assert Membership.objects.get(user=alice, team=vision).valid_until is None  # kept
    assert Membership.objects.get(user=alice, team=nlp).valid_until is None
    unread = ExternalIdentity.objects.get(user=alice).claims_unread
    assert "“realm_access” is an object" in unread["realm_access"]
    entry = AuditEntry.objects.filter(action="sso.login", object_id=str(alice.pk)).latest("at")
    assert entry.changes["kept"] == ["member of Vision"]
    home = html.unescape(_admin().get("/").content.decode())
    assert "People whose groups the provider did not send readably" in home


def test_the_preview_replays_object_claims_and_shows_who_is_refused_or_kept(oidc_provider):
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    MappingRule.objects.create(position=1, claim="groups", value="nlp", grant="member",
                               team=nlp, is_billing=True)
    oidc_provider.set_user("kc-alice", **KEYCLOAK_ALICE, groups=["nlp"])
    oidc_provider.set_user("kc-bob", preferred_username="bob", email="bob@example.org",
                           realm_access={"roles": ["gpu-user"]})
    oidc_provider.login("kc-alice")
    oidc_provider.login("kc-bob")
    admin = _admin()

    rows = admin.post("/api/v1/sso/rules/preview", {"rule": {**RULE, "is_billing": True}},
                      content_type="application/json").json()

    by_user = {row["user"]: row for row in rows}
    assert by_user["alice"]["refused"] == "login refused: two billing teams (NLP and Vision)"
    assert by_user["bob"]["started"] == ["member of Vision (billing)"]
    assert by_user["bob"]["refused"] == ""

    MappingRule.objects.create(position=2, claim="resource_access", value="x",
                               grant="member", team=vision)  # not through the save check
    page = html.unescape(admin.get("/manage/sso/preview/", {
        "username": "alice", "claim": "groups", "match": "equals"}).content.decode())
    assert "kept as they are (nothing yet): resource_access: “resource_access” is an " \
           "object" in page
    assert "“resource_access.gpuquota.roles”" in page
