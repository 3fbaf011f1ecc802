"""Reading claims as identity providers send them (accounts.sso.claims): dotted paths into
objects, lists of objects, names that hold dots, a claim withheld on purpose, and a
value that is not names, each said with the reason."""

import pytest

from accounts.sso.claims import ClaimRead, claim_read, claims_with_groups

pytestmark = pytest.mark.sso

KEYCLOAK = {"realm_access": {"roles": ["offline_access", "gpu-admin"]},
            "resource_access": {"gpuquota": {"roles": ["nlp-user"]},
                                "portal.example.org": {"roles": ["viewer"]},
                                "account": {"roles": ["view-profile"]}},
            "groups": ["/org/ml/vision-leads"]}


@pytest.mark.parametrize("path, names", [
    ("realm_access.roles", ("offline_access", "gpu-admin")),
    ("resource_access.gpuquota.roles", ("nlp-user",)),
    ("resource_access.portal.example.org.roles", ("viewer",)),  # a client id with dots
    ("groups", ("/org/ml/vision-leads",)),
    ("resource_access.nobody.roles", ()),
    ("absent", ()),
])
def test_dotted_paths_into_keycloaks_objects(path, names):
    assert claim_read(KEYCLOAK, path) == ClaimRead(values=names)


def test_a_list_of_objects_gives_each_objects_value_and_a_name_may_hold_dots():
    claims = {"groups": [{"name": "vision", "id": 7}, {"name": "nlp", "id": 8}],
              "https://example.org/claims/team": "vision", "uidNumber": 10001}
    assert claim_read(claims, "groups.name").values == ("vision", "nlp")
    assert claim_read(claims, "groups.id").values == ("7", "8")
    assert claim_read(claims, "https://example.org/claims/team").values == ("vision",)
    assert claim_read(claims, "uidNumber").values == ("10001",)
    assert claim_read({"groups": []}, "groups.name").values == ()


@pytest.mark.parametrize("claims, path, said", [
    (KEYCLOAK, "realm_access", "“realm_access” is an object, not a name or a list of names; "
                               "name a path inside it, e.g. “realm_access.roles”"),
    (KEYCLOAK, "resource_access", "e.g. “resource_access.gpuquota.roles”"),
    ({"groups": [{"name": "vision"}]}, "groups", "is a list of objects, not a name or a "
                                                 "list of names; name a path inside it, "
                                                 "e.g. “groups.name”"),
    ({"groups": 42.5}, "groups", "is a float"),
    ({"groups": ["vision", True]}, "groups", "is a list holding other things than names"),
])
def test_a_value_that_is_not_names_is_a_problem_naming_the_paths_inside(claims, path, said):
    read = claim_read(claims, path)
    assert read.values == () and said in read.problem


def test_entras_overage_is_told_from_no_groups():
    overage = {"_claim_names": {"groups": "src1"},
               "_claim_sources": {"src1": {"endpoint": "https://graph.windows.net/t/users/o/"
                                                       "getMemberObjects"}}}
    assert "group overage" in claim_read(overage, "groups").problem
    assert "group overage" in claim_read({"hasgroups": True}, "groups").problem
    assert claim_read({}, "groups") == ClaimRead()  # no claim at all is no groups
    assert claim_read(overage, "roles") == ClaimRead()


def test_the_groups_claim_may_be_a_path_and_a_claim_at_the_providers_limit_is_cut():
    assert claims_with_groups(KEYCLOAK, "realm_access.roles")["groups"] == [
        "offline_access", "gpu-admin"]
    renamed = claims_with_groups({"groups": ["x"], "roles": ["r"]}, "absent")
    assert "groups" not in renamed  # the configured claim, or nothing
    withheld = claims_with_groups({"_claim_names": {"memberOf": "src1"}}, "memberOf")
    assert "group overage" in claim_read(withheld, "groups").problem
    cut = claims_with_groups({"groups": [f"g{n}" for n in range(100)]}, "groups", 100)
    assert "its limit" in claim_read(cut, "groups").problem
    whole = claims_with_groups({"groups": [f"g{n}" for n in range(99)]}, "groups", 100)
    assert len(claim_read(whole, "groups").values) == 99
