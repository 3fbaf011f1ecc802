"""A first login through a provider whose vouched address is an existing account's: held
for a platform admin to link (then it is that account, history and teams included) or to
refuse, never a silent second account; and unix names from claims that are no names."""

import html

import pytest
from django.test import Client

from accounts.models import (
    ClusterIdentity,
    ExternalIdentity,
    IdentityLinkRequest,
    MappingRule,
    Membership,
    User,
)
from gpuquota.core.models import AuditEntry
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
)

pytestmark = [pytest.mark.sso, pytest.mark.django_db]

ALICE_AT_KEYCLOAK = {"preferred_username": "alice", "email": "Alice@Example.org",
                     "email_verified": True, "groups": ["vision"]}


def _text(client: Client, response) -> str:
    if response.status_code == 302 and response["Location"] == "/accounts/login/":
        return html.unescape(client.get("/accounts/login/").content.decode())
    return html.unescape(response.content.decode())


def test_an_existing_accounts_address_is_held_then_linked_by_an_admin(
        oidc_provider, settings, django_capture_on_commit_callbacks):
    from gpuquota.mail.models import MailDelivery

    settings.MAIL_ENABLED = True
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    MappingRule.objects.create(position=1, value="vision", grant="member", team=vision)
    alice = UserFactory(username="alice", email="alice@example.org")
    history = MembershipFactory(user=alice, team=nlp, is_billing=True)
    admin = AdminFactory()
    oidc_provider.set_user("kc-7", **ALICE_AT_KEYCLOAK)

    with django_capture_on_commit_callbacks(execute=True):
        client, response = oidc_provider.login("kc-7")

    page = _text(client, response)
    assert "An account with your email address (A…@Example.org) already exists" in page
    assert "a platform admin must confirm" in page
    assert User.objects.count() == 2 and not ExternalIdentity.objects.exists()
    held = IdentityLinkRequest.objects.get()
    assert (held.status, held.email, held.username) == ("pending", "Alice@Example.org", "alice")
    assert MailDelivery.objects.filter(recipient=admin, template="sso_link_request").exists()
    oidc_provider.login("kc-7")  # trying again changes nothing and mails nobody again
    assert IdentityLinkRequest.objects.count() == 1
    assert MailDelivery.objects.filter(template="sso_link_request").count() == 1

    staff = Client()
    staff.force_login(admin)
    assert "Alice@Example.org" in staff.get("/manage/sso/links/").content.decode()
    assert "First sign-ins waiting to be linked" in staff.get("/").content.decode()
    staff.post(f"/manage/sso/links/{held.pk}/", {"user": alice.pk})

    _, response = oidc_provider.login("kc-7")
    assert response.status_code == 302 and response["Location"] != "/accounts/login/"
    assert ExternalIdentity.objects.get().user == alice and User.objects.count() == 2
    assert Membership.objects.get(user=alice, team=vision).source == "rules"
    history.refresh_from_db()
    assert history.valid_until is None  # her hand-made history and billing team stay
    assert AuditEntry.objects.filter(action="sso.link_confirm", object_id=str(alice.pk)
                                     ).exists()


def test_a_refused_link_is_said_at_each_login_and_an_unvouched_address_is_no_claim(
        oidc_provider):
    UserFactory(username="alice", email="alice@example.org")
    oidc_provider.set_user("kc-7", **ALICE_AT_KEYCLOAK)
    oidc_provider.login("kc-7")
    staff = Client()
    staff.force_login(AdminFactory())
    held = IdentityLinkRequest.objects.get()
    staff.post(f"/manage/sso/links/{held.pk}/", {"decision": "refuse"})

    client, response = oidc_provider.login("kc-7")
    assert "an admin declined to make this login that account's" in _text(client, response)
    assert not ExternalIdentity.objects.exists()

    # a provider that does not vouch for the address: no address is taken from it at all
    oidc_provider.set_user("kc-8", preferred_username="mallory", email="alice@example.org",
                           email_verified=False)
    _, response = oidc_provider.login("kc-8")
    mallory = ExternalIdentity.objects.get(subject="kc-8").user
    assert (mallory.username, mallory.email) == ("mallory", "")


def test_a_unix_name_from_a_claim_that_is_no_name_becomes_no_identity(oidc_provider, settings):
    settings.GPUQUOTA_SSO_CLUSTER_USER_CLAIM = "preferred_username"
    settings.GPUQUOTA_SSO_CLUSTER_UID_CLAIM = "uidNumber"
    ClusterFactory(slug="hpc")
    ClusterFactory(slug="k8s")
    oidc_provider.set_user("kc-9", preferred_username="zed,root", email="zed@example.org",
                           uidNumber=0)

    _, response = oidc_provider.login("kc-9")

    assert response.status_code == 302 and response["Location"] == "/"  # logged in
    zed = ExternalIdentity.objects.get(subject="kc-9").user
    assert not ClusterIdentity.objects.filter(user=zed).exists()
    entry = AuditEntry.objects.get(action="sso.cluster_name_refused", object_id=str(zed.pk))
    assert "'zed,root'" in entry.reason and "letters, digits" in entry.reason
    assert "A unix uid is a whole number from 1" in entry.reason
    staff = Client()
    staff.force_login(AdminFactory())
    assert "Unix names or uids from sign-in claims refused" in html.unescape(
        staff.get("/").content.decode())
