"""What PostgreSQL guarantees of single sign-on's data, whatever the code does."""

import pytest
from django.db import IntegrityError, connection, transaction

from accounts.models import ExternalIdentity
from accounts.sso.services import ProviderLogin, sso_login
from tests.factories import TeamFactory, UserFactory

pytestmark = [pytest.mark.sso, pytest.mark.postgres, pytest.mark.django_db]


def _insert_identity(user_id: int, issuer: str, subject: str, source: str = "oidc") -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts_externalidentity (user_id, source, provider, issuer, subject,"
            " first_login_at, last_login_at, last_claims, admin_by_rules, disabled_reason,"
            " claims_unread) VALUES (%s, %s, 'kc', %s, %s, now(), now(), '{}', false, '', '{}')",
            [user_id, source, issuer, subject])


def test_one_user_per_issuer_and_subject():
    first, second = UserFactory(), UserFactory()
    _insert_identity(first.pk, "https://kc", "s-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        _insert_identity(second.pk, "https://kc", "s-1")
    _insert_identity(second.pk, "https://other", "s-1")  # another issuer's s-1 is another
    assert ExternalIdentity.objects.count() == 2


@pytest.mark.parametrize("issuer, subject, source", [
    ("", "s-1", "oidc"), ("https://kc", "", "oidc"), ("https://kc", "s-1", "saml")])
def test_an_identity_names_its_issuer_subject_and_a_known_source(issuer, subject, source):
    with pytest.raises(IntegrityError), transaction.atomic():
        _insert_identity(UserFactory().pk, issuer, subject, source)


def test_a_membership_source_is_hand_or_rules():
    user, team = UserFactory(), TeamFactory()
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts_membership (user_id, team_id, role, is_billing, valid_from,"
            " source) VALUES (%s, %s, 'member', false, now(), 'ldap')", [user.pk, team.pk])


@pytest.mark.parametrize("grant, with_team, billing", [
    ("admin", True, False), ("lead", False, False), ("admin", False, True)])
def test_a_rule_grants_admin_without_a_team_and_a_role_with_one(grant, with_team, billing):
    team = TeamFactory()
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts_mappingrule (position, provider, claim, match, value, \"grant\","
            " team_id, is_billing, is_active) VALUES (1, '', 'groups', 'equals', 'g', %s, %s,"
            " %s, true)", [grant, team.pk if with_team else None, billing])


@pytest.mark.django_db(transaction=True)
def test_a_login_racing_its_twin_leaves_one_user():
    from tests.helpers import run_concurrently

    login = ProviderLogin(source="oidc", provider="kc", issuer="https://kc", subject="s-race",
                          claims={}, username="racer")
    outcomes = run_concurrently([lambda: sso_login(login=login)] * 2)
    assert ExternalIdentity.objects.filter(subject="s-race").count() == 1
    assert any(not isinstance(o, Exception) for o in outcomes), outcomes
