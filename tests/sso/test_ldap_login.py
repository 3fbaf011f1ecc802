"""LDAP login against a real slapd: bind, user search, groups of both kinds, the mapping
rules at every login, and a directory that is down or refuses the service bind."""

import html

import pytest
from django.test import Client

from accounts.models import ClusterIdentity, ExternalIdentity, MappingRule, Membership, User
from gpuquota.core.models import AuditEntry
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
)
from tests.sso.slapd import GROUP_BASE, USER_BASE, slapd_missing

pytestmark = [pytest.mark.sso, pytest.mark.django_db,
              pytest.mark.skipif(bool(slapd_missing()), reason=slapd_missing() or "-")]


def _login(username: str, password: str):
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    response.text = html.unescape(response.content.decode())
    return client, response


def _rule(position, value, grant, team=None, *, billing=False, match="equals"):
    return MappingRule.objects.create(position=position, claim="groups", value=value,
                                      match=match, grant=grant, team=team, is_billing=billing)


def test_directory_login_creates_the_user_keyed_by_entry_uuid_with_the_groups_roles(slapd):
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    _rule(1, "vision-leads", "lead", vision, billing=True)
    _rule(2, "vision-*", "member", vision, match="glob")
    _rule(3, "nlp", "member", nlp, billing=True)

    client, response = _login("alice", "pw-alice")

    assert response.status_code == 302
    alice = User.objects.get(username="alice")
    assert (alice.email, alice.first_name, alice.last_name) == (
        "alice@example.org", "Alice", "Archer")
    assert not alice.has_usable_password()
    identity = ExternalIdentity.objects.get(user=alice)
    assert identity.source == "ldap" and len(identity.subject) == 36  # entryUUID
    assert identity.last_claims["groups"] == ["vision-leads"]
    membership = Membership.objects.get(user=alice)
    assert (membership.team, membership.role, membership.is_billing, membership.source) == (
        vision, "lead", True, "rules")
    assert client.get("/api/v1/me").json()["memberships"] == [
        {"team": "vision", "role": "lead", "is_billing": True}]

    _login("bob", "pw-bob")  # groupOfNames vision-staff and posixGroup nlp
    bob = User.objects.get(username="bob")
    got = {(m.team.slug, m.role, m.is_billing) for m in Membership.objects.filter(user=bob)}
    assert got == {("vision", "member", False), ("nlp", "member", True)}


def test_wrong_password_is_refused_and_creates_nothing(slapd):
    _, response = _login("alice", "not-her-password")
    assert response.status_code == 200
    assert "Wrong user name or password." in response.text
    assert not User.objects.filter(username="alice").exists()


def test_a_user_added_to_a_group_leads_at_next_login_and_removed_the_membership_ends(slapd):
    vision = TeamFactory(slug="vision", name="Vision")
    _rule(1, "vision-leads", "lead", vision)
    _login("bob", "pw-bob")
    bob = User.objects.get(username="bob")
    assert not Membership.objects.filter(user=bob).exists()
    hand_made = MembershipFactory(user=bob, team=TeamFactory(slug="infra"), role="member")

    slapd.modify(f"dn: cn=vision-leads,{GROUP_BASE}\nchangetype: modify\nadd: member\n"
                 f"member: uid=bob,{USER_BASE}\n")
    _login("bob", "pw-bob")
    lead = Membership.objects.get(user=bob, team=vision)
    assert (lead.role, lead.valid_until, lead.source) == ("lead", None, "rules")

    slapd.modify(f"dn: cn=vision-leads,{GROUP_BASE}\nchangetype: modify\ndelete: member\n"
                 f"member: uid=bob,{USER_BASE}\n")
    _login("bob", "pw-bob")
    lead.refresh_from_db()
    assert lead.valid_until is not None  # ended, dated, kept
    hand_made.refresh_from_db()
    assert hand_made.valid_until is None  # made by hand: left alone
    assert AuditEntry.objects.filter(action="sso.login", object_id=str(bob.pk),
                                     changes__ended=["lead of Vision"]).exists()


def test_two_billing_teams_are_refused_naming_both_and_admins_are_told(
        slapd, settings, django_capture_on_commit_callbacks):
    settings.MAIL_ENABLED = True
    admin = AdminFactory(email="root@example.org")
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    _rule(1, "vision-staff", "member", vision, billing=True)
    _rule(2, "nlp", "member", nlp, billing=True)

    with django_capture_on_commit_callbacks(execute=True):
        _, response = _login("bob", "pw-bob")

    page = response.text
    assert response.status_code == 200 and "two teams at once" in page
    assert "NLP and Vision" in page
    assert not User.objects.filter(username="bob").exists()
    from gpuquota.mail.models import MailDelivery
    assert MailDelivery.objects.filter(recipient=admin, template="sso_billing_conflict").exists()


def test_cluster_identities_come_from_the_directory_attributes(slapd, settings):
    settings.GPUQUOTA_SSO_CLUSTER_USER_CLAIM = "uid"
    settings.GPUQUOTA_SSO_CLUSTER_UID_CLAIM = "uidNumber"
    cluster = ClusterFactory(slug="hpc")
    # a local account of the same name (another address) is not her
    UserFactory(username="alice", email="alice@elsewhere.example.org")

    _login("alice", "pw-alice")

    identity = ExternalIdentity.objects.get(provider="ldap")
    assert identity.user.username == "alice-ldap"
    keys = {(i.kind, i.key) for i in ClusterIdentity.objects.filter(cluster=cluster,
                                                                      user=identity.user)}
    assert keys == {("unix_user", "alice"), ("unix_uid", "10001")}


def test_a_directory_that_is_down_is_said_so_and_break_glass_still_logs_in(slapd, settings):
    AdminFactory(username="root")
    settings.GPUQUOTA_LOCAL_LOGIN_USERS = "root"
    slapd.stop()

    _, response = _login("alice", "pw-alice")
    assert "does not answer right now" in response.text
    assert not User.objects.filter(username="alice").exists()

    _, response = _login("root", "password")
    assert response.status_code == 302


def test_a_refused_service_bind_is_said_so(slapd, settings):
    settings.GPUQUOTA_LDAP_BIND_PASSWORD = "wrong"
    _, response = _login("alice", "pw-alice")
    assert "refused gpuquota's own bind" in response.text
    assert not User.objects.filter(username="alice").exists()


def test_a_user_gone_from_the_directory_loses_api_tokens_at_the_periodic_check(slapd):
    from accounts.services import api_token_create, api_token_use
    from accounts.sso.ldap import ldap_subjects_active
    from accounts.sso.services import sso_identities_check

    _login("alice", "pw-alice")
    alice = User.objects.get(username="alice")
    _, key = api_token_create(user=alice, name="ci")
    assert sso_identities_check(directory_active=ldap_subjects_active()) == 0
    assert api_token_use(key=key) is not None

    slapd.modify(f"dn: uid=alice,{USER_BASE}\nchangetype: delete\n")
    assert sso_identities_check(directory_active=ldap_subjects_active()) == 1
    assert api_token_use(key=key) is None
