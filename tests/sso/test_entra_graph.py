"""Entra ID's group overage: the ID token carries a link instead of `groups`, and gpuquota
asks Microsoft Graph (a loopback one that checks the login's bearer token against the
provider) for the user's groups, page by page; when Graph fails, nobody is locked out:
the memberships the groups decide are kept, and the reason is said and audited."""

import pytest

from accounts.models import ExternalIdentity, MappingRule, Membership, User
from gpuquota.core.models import AuditEntry
from tests.factories import TeamFactory
from tests.sso.graph import GraphServer, directory_role, group

pytestmark = [pytest.mark.sso, pytest.mark.django_db]

LEADS = "0b6f6d2a-6c5e-4d1f-9c0e-5b3a1d2f4e01"
VISION = "7d1e0c4b-2a9f-4e3d-8b6a-9f0e1d2c3b02"
SUB = "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ"
TENANT = "9188040d-6c67-4c5b-b112-36a304b66dad"
OID = "00000000-0000-0000-66f3-3332eca7ea81"
ALICE = {"oid": OID, "tid": TENANT, "ver": "2.0", "name": "Alice Archer",
         "preferred_username": "alice@contoso.com", "email": "alice@contoso.com"}
OVERAGE = {**ALICE, "_claim_names": {"groups": "src1"}, "_claim_sources": {"src1": {
    "endpoint": f"https://graph.windows.net/{TENANT}/users/{OID}/getMemberObjects"}}}


@pytest.fixture
def graph(oidc_provider):
    with GraphServer(f"{oidc_provider.url}/userinfo") as server:
        oidc_provider.configure(name="entra", graph_url=server.base)
        yield server


@pytest.fixture
def alice_lead(oidc_provider, graph):
    """Alice logged in once with her groups in the token: lead of Vision (billing)."""
    vision = TeamFactory(slug="vision", name="Vision")
    MappingRule.objects.create(position=20, provider="entra", claim="groups", value=LEADS,
                               grant="lead", team=vision, is_billing=True)
    MappingRule.objects.create(position=30, provider="entra", claim="groups", value=VISION,
                               grant="member", team=vision, is_billing=True)
    oidc_provider.set_user(SUB, **ALICE, groups=[LEADS, VISION])
    oidc_provider.login(SUB)
    alice = User.objects.get(external_identities__subject=SUB)
    assert _current(alice) == {("vision", "lead", True)}
    assert graph.seen == []  # the token carried the groups: Graph is not asked
    return alice


def _current(user: User) -> set[tuple[str, str, bool]]:
    return {(m.team.slug, m.role, m.is_billing)
            for m in Membership.objects.filter(user=user, valid_until__isnull=True)}


def test_an_overage_reads_the_groups_from_graph_page_by_page(oidc_provider, graph, alice_lead):
    graph.memberships[SUB] = [directory_role("62e90394-69f5-4237-9190-012177145e10"),
                              group("11111111-1111-1111-1111-111111111111"),
                              {"@odata.type": "#microsoft.graph.administrativeUnit",
                               "id": "22222222-2222-2222-2222-222222222222"},
                              group(VISION), group("33333333-3333-3333-3333-333333333333")]
    oidc_provider.set_user(SUB, **OVERAGE)

    _, response = oidc_provider.login(SUB)

    assert response.status_code == 302 and response["Location"] == "/"
    # Graph says she is in Vision but no longer among its leads: the rules apply to that
    assert _current(alice_lead) == {("vision", "member", True)}
    assert [subject for _, subject in graph.seen] == [SUB, SUB, SUB]  # 3 pages, her token
    assert graph.seen[0][0].startswith("/v1.0/me/transitiveMemberOf?$select=id")
    identity = ExternalIdentity.objects.get(user=alice_lead)
    assert identity.claims_unread == {}
    assert identity.last_claims["groups"] == ["11111111-1111-1111-1111-111111111111", VISION,
                                              "33333333-3333-3333-3333-333333333333"]
    assert "Microsoft Graph" in identity.last_claims["_gpuquota_filled"]["groups"]
    assert "_claim_names" not in identity.last_claims
    entry = AuditEntry.objects.filter(action="sso.login",
                                      object_id=str(alice_lead.pk)).latest("at")
    assert entry.changes["started"] == ["member of Vision (billing)"]


@pytest.mark.parametrize("failure, says", [
    ("down", "answered 503"),
    ("refused", "refused with 401"),
    ("slow", "no answer within 1 s"),
    ("elsewhere", "outside the configured Graph URL"),
])
def test_graph_failing_keeps_the_memberships_and_says_why(oidc_provider, graph, alice_lead,
                                                          settings, failure, says):
    graph.memberships[SUB] = [group(VISION), group(LEADS), group(VISION + "0")]
    if failure == "down":
        graph.status = 503
    elif failure == "refused":
        graph.userinfo_url = f"{oidc_provider.url}/no-such-endpoint"  # no token passes
    elif failure == "slow":
        settings.GPUQUOTA_OIDC_TIMEOUT_S = "1"
        graph.delay_s = 2.5
    else:
        elsewhere = GraphServer(f"{oidc_provider.url}/userinfo").__enter__()
        graph.next_base = elsewhere.base
    oidc_provider.set_user(SUB, **OVERAGE)

    try:
        _, response = oidc_provider.login(SUB)
    finally:
        if failure == "elsewhere":
            elsewhere.__exit__()

    assert response.status_code == 302 and response["Location"] == "/"  # not locked out
    assert _current(alice_lead) == {("vision", "lead", True)}  # kept as it was
    unread = ExternalIdentity.objects.get(user=alice_lead).claims_unread["groups"]
    assert "Microsoft Graph did not give them" in unread and says in unread
    entry = AuditEntry.objects.filter(action="sso.claims_unread",
                                      object_id=str(alice_lead.pk)).latest("at")
    assert says in entry.changes["unread"]["groups"]
    if failure == "elsewhere":
        assert elsewhere.seen == []  # the token went nowhere else


def test_without_a_graph_url_an_overage_is_kept_as_before(oidc_provider, graph, alice_lead):
    oidc_provider.configure(graph_url="")
    graph.memberships[SUB] = [group(VISION)]
    oidc_provider.set_user(SUB, **OVERAGE)

    oidc_provider.login(SUB)

    assert graph.seen == []
    assert _current(alice_lead) == {("vision", "lead", True)}
    unread = ExternalIdentity.objects.get(user=alice_lead).claims_unread["groups"]
    assert "group overage" in unread and "Graph" not in unread
