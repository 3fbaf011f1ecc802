"""The rules' save check knows every claim recent logins carried, per provider, as paths
and shapes (never values), for GPUQUOTA_SSO_CLAIM_SHAPES_DAYS: a claim too large to keep
with the last login is known too, a claim no recent login carried is saved with a
warning naming the field, and shapes older than the window count for nothing."""

import html
import json
from datetime import timedelta

import pytest
from django.test import Client

from accounts.models import ClaimShape, ExternalIdentity
from accounts.sso.services import CLAIM_KEPT_MAX
from accounts.sso.shapes import claim_shapes, claim_shapes_prune, claim_shapes_record
from tests.factories import AdminFactory, TeamFactory

pytestmark = [pytest.mark.sso, pytest.mark.django_db]

RULE = {"position": 10, "claim": "groups", "match": "equals", "value": "vision",
        "grant": "member", "team": "vision"}
ENTRA_OVERAGE = {"sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
                 "email": "alice@contoso.com", "name": "Alice Archer",
                 "roles": ["GpuQuota.Admin"], "_claim_names": {"groups": "src1"},
                 "_claim_sources": {"src1": {"endpoint": "https://graph.windows.net/t/x"}},
                 "nonce": "n-1"}


def _post_rule(**changes):
    admin = Client()
    admin.force_login(AdminFactory())
    return admin, admin.post("/api/v1/sso/rules", {**RULE, **changes},
                             content_type="application/json")


def test_a_claim_too_large_to_keep_is_still_known_to_the_save_check(oidc_provider):
    TeamFactory(slug="vision", name="Vision")
    clients = {f"client-{n:03}": {"roles": [f"role-{n}-{r}" for r in range(20)]}
               for n in range(60)}
    assert len(json.dumps(clients)) > CLAIM_KEPT_MAX
    oidc_provider.set_user("kc-alice", preferred_username="alice", groups=["vision"],
                           resource_access=clients)
    oidc_provider.login("kc-alice")
    assert "resource_access" not in ExternalIdentity.objects.get().last_claims

    _, refused = _post_rule(claim="resource_access", provider="mock")

    assert refused.status_code == 400
    error = refused.json()["errors"][0]
    assert error["field"] == "claim"
    assert error["message"].startswith("“resource_access” is an object in logins through "
                                       "mock of the last 30 days, not a name")
    assert "e.g. “resource_access.client-000.roles”" in error["message"]
    _, deep = _post_rule(claim="resource_access.client-007")
    assert "is an object" in deep.json()["errors"][0]["message"]
    _, saved = _post_rule(claim="resource_access.client-007.roles")
    assert saved.status_code == 201 and saved.json()["warnings"] == []


def test_a_claim_no_recent_login_carried_saves_with_a_warning_naming_the_field(oidc_provider):
    TeamFactory(slug="vision", name="Vision")
    oidc_provider.set_user("kc-bob", preferred_username="bob", groups=["vision"],
                           realm_access={"roles": ["gpu-user"]})
    oidc_provider.login("kc-bob")

    admin, typo = _post_rule(claim="group")

    assert typo.status_code == 201
    assert typo.json()["warnings"] == [{
        "field": "claim",
        "message": "No login of the last 30 days carried “group”: the rule matches nobody "
                   "yet; did you mean “groups”?"}]
    _, right = _post_rule(claim="realm_access.roles", provider="mock")
    assert right.json()["warnings"] == []
    changed = admin.patch(f"/api/v1/sso/rules/{typo.json()['id']}", {"claim": "groups"},
                          content_type="application/json")
    assert changed.status_code == 200 and changed.json()["warnings"] == []
    page = html.unescape(admin.get("/manage/sso/preview/", {
        "claim": "realm_access.role", "match": "equals", "value": "gpu-user",
        "grant": "member", "team": TeamFactory._meta.model.objects.get().pk,
        "with_candidate": "on", "position": 5}).content.decode())
    assert "claim: No login of the last 30 days carried “realm_access.role”" in page
    assert "did you mean “realm_access.roles”?" in page


def test_a_claim_the_provider_withheld_at_every_login_is_saved_with_a_warning(clock):
    TeamFactory(slug="vision", name="Vision")
    claim_shapes_record(provider="entra", claims=ENTRA_OVERAGE, now=clock.now)

    _, saved = _post_rule(provider="entra")

    assert saved.status_code == 201
    (warning,) = saved.json()["warnings"]
    assert warning["field"] == "claim"
    assert warning["message"].startswith("The provider withheld “groups” in every one of the "
                                         "logins through entra of the last 30 days")


def test_paths_and_shapes_are_kept_never_values_nor_secrets(clock):
    claim_shapes_record(provider="entra", claims=ENTRA_OVERAGE, now=clock.now)
    claim_shapes_record(provider="keycloak", now=clock.now, claims={
        "groups": [{"name": "vision", "path": "/org/vision"}], "email_verified": True,
        "amr": ["pwd", {"x": 1}], "acr": None, "_gpuquota_cut": {"groups": "cut"}})

    kept = set(ClaimShape.objects.values_list("provider", "path", "shape"))

    assert kept == {("entra", "sub", "name"), ("entra", "email", "name"),
                    ("entra", "name", "name"), ("entra", "roles", "names"),
                    ("entra", "groups", "withheld"),
                    ("keycloak", "groups", "objects"), ("keycloak", "groups.name", "name"),
                    ("keycloak", "groups.path", "name"), ("keycloak", "email_verified", "other"),
                    ("keycloak", "amr", "list"), ("keycloak", "amr.x", "name"),
                    ("keycloak", "acr", "null")}
    values = json.dumps(list(ClaimShape.objects.values()), default=str)
    assert "alice" not in values and "graph.windows.net" not in values and "n-1" not in values


def test_shapes_older_than_the_window_count_for_nothing_and_are_pruned(clock):
    TeamFactory(slug="vision", name="Vision")
    claim_shapes_record(provider="keycloak", now=clock.now - timedelta(days=31),
                        claims={"realm_access": {"roles": ["gpu-user"]}})
    claim_shapes_record(provider="keycloak", now=clock.now - timedelta(days=29),
                        claims={"groups": ["vision"]})

    _, saved = _post_rule(claim="realm_access")  # an object 31 days ago: no longer known

    assert saved.status_code == 201
    assert "No login of the last 30 days carried “realm_access”" in \
        saved.json()["warnings"][0]["message"]
    assert claim_shapes_prune(now=clock.now) == 2  # realm_access, realm_access.roles
    assert list(ClaimShape.objects.values_list("path", flat=True)) == ["groups"]


def test_a_path_seen_again_keeps_its_first_sighting(clock):
    first = clock.now - timedelta(days=3)
    claim_shapes_record(provider="okta", claims={"groups": ["a"]}, now=first)
    claim_shapes_record(provider="okta", claims={"groups": ["b"]}, now=clock.now)
    claim_shapes_record(provider="okta", claims={"groups": "c"}, now=clock.now)
    rows = {r.shape: (r.first_seen_at, r.last_seen_at) for r in ClaimShape.objects.all()}
    assert rows == {"names": (first, clock.now), "name": (clock.now, clock.now)}


def test_a_login_carries_at_most_so_many_paths():
    claims = {f"claim-{n}": {"inner": n} for n in range(300)}
    assert len(claim_shapes(claims)) == 256


def test_the_admin_says_the_warning_when_it_saves_the_rule(clock):
    team = TeamFactory(slug="vision", name="Vision")
    claim_shapes_record(provider="keycloak", now=clock.now, claims={"groups": ["vision"]})
    admin = Client()
    admin.force_login(AdminFactory())

    saved = admin.post("/admin/accounts/mappingrule/add/", {
        "position": 1, "claim": "grups", "match": "equals", "value": "vision",
        "grant": "member", "team": team.pk, "is_active": "on"}, follow=True)

    page = html.unescape(saved.content.decode())
    assert "Claim: No login of the last 30 days carried “grups”" in page  # capfirst
    assert "did you mean “groups”?" in page
