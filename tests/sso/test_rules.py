"""The mapping rules: the login service applying them, their API (admins, audited, one
error format), their preview, and the local login limited to break-glass accounts."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ExternalIdentity, MappingRule, Membership, User
from accounts.services import api_token_create, api_token_use
from accounts.sso.errors import LoginRefused
from accounts.sso.services import ProviderLogin, sso_identities_check, sso_login
from gpuquota.core.models import AuditEntry
from tests.factories import AdminFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.sso, pytest.mark.django_db]


def _login(sub="s-1", groups=(), provider="kc", **claims):
    return sso_login(login=ProviderLogin(
        source="oidc", provider=provider, issuer=f"https://{provider}.example.org",
        subject=sub, claims={"groups": list(groups), **claims}, username=f"user-{sub}",
        email=f"{sub}@example.org"))


def _rule(position, value, grant, team=None, **fields):
    return MappingRule.objects.create(position=position, value=value, grant=grant, team=team,
                                      **fields)


def test_the_first_matching_rule_decides_a_teams_role_and_patterns_match_whole_values():
    vision = TeamFactory(slug="vision", name="Vision")
    _rule(1, "vision-lead.*", "lead", vision, match="regex")
    _rule(2, "vision*", "member", vision, match="glob", is_billing=True)
    user = _login(groups=["vision-leads"]).user
    m = Membership.objects.get(user=user)
    assert (m.role, m.is_billing) == ("lead", True)  # role from rule 1, billing from rule 2
    other = _login(sub="s-2", groups=["xvision-leads"]).user  # regex is a full match
    assert not Membership.objects.filter(user=other).exists()


def test_a_rule_limited_to_a_provider_ignores_the_others():
    vision = TeamFactory(slug="vision")
    _rule(1, "vision", "member", vision, provider="okta")
    assert not Membership.objects.filter(user=_login(groups=["vision"]).user).exists()
    assert Membership.objects.filter(user=_login(sub="s-2", groups=["vision"],
                                                 provider="okta").user).exists()


def test_admin_by_rule_is_taken_back_but_a_hand_made_admin_stays():
    _rule(1, "gpu-admins", "admin")
    user = _login(groups=["gpu-admins"]).user
    assert user.is_staff
    assert not _login(groups=[]).user.is_staff
    hand_made = _login(sub="s-9").user
    hand_made.is_staff = True
    hand_made.save()
    assert _login(sub="s-9", groups=[]).user.is_staff


def test_two_billing_teams_with_a_hand_made_one_refuse_the_login_and_change_nothing():
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    _rule(1, "vision", "member", vision, is_billing=True)
    user = _login().user
    MembershipFactory(user=user, team=nlp, is_billing=True)
    user.email = "kept@example.org"
    user.save()
    with pytest.raises(LoginRefused, match="NLP and Vision"):
        _login(groups=["vision"])
    assert User.objects.get(pk=user.pk).email == "kept@example.org"
    assert not Membership.objects.filter(user=user, team=vision).exists()
    assert AuditEntry.objects.filter(action="sso.login_refused", object_id=str(user.pk)).exists()


def test_a_billing_grant_for_a_team_joined_by_hand_changes_nothing_and_refuses_nothing():
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    _rule(1, "vision", "lead", vision, is_billing=True)
    user = _login().user
    by_hand = MembershipFactory(user=user, team=vision, role="member")
    MembershipFactory(user=user, team=nlp, is_billing=True)
    _login(groups=["vision"])
    assert list(Membership.objects.filter(user=user, team=vision)) == [by_hand]


def test_a_user_disabled_in_gpuquota_cannot_log_in_through_the_provider():
    user = _login().user
    user.is_active = False
    user.save()
    with pytest.raises(LoginRefused, match="disabled in gpuquota"):
        _login()


def test_api_tokens_stop_when_the_provider_no_longer_vouches_and_resume_at_next_login(settings):
    settings.GPUQUOTA_SSO_TOKEN_REAUTH_DAYS = "30"
    user = _login().user
    _, key = api_token_create(user=user, name="ci")
    later = timezone.now() + timedelta(days=31)
    assert sso_identities_check(now=later) == 1
    assert sso_identities_check(now=later) == 0  # idempotent
    assert api_token_use(key=key) is None
    _login()
    assert ExternalIdentity.objects.get(user=user).disabled_at is None
    assert api_token_use(key=key) is not None


def test_rules_over_the_api_are_admin_only_audited_and_refuse_bad_input_by_field():
    vision = TeamFactory(slug="vision")
    admin, member = Client(), Client()
    admin.force_login(AdminFactory())
    member.force_login(UserFactory())
    body = {"position": 1, "claim": "groups", "match": "glob", "value": "vision*",
            "grant": "lead", "team": "vision", "is_billing": True}
    assert member.post("/api/v1/sso/rules", body, content_type="application/json"
                       ).status_code == 403
    created = admin.post("/api/v1/sso/rules", body, content_type="application/json")
    assert created.status_code == 201, created.json()
    rule_id = created.json()["id"]
    assert AuditEntry.objects.filter(action="sso_rule.create", object_id=str(rule_id)).exists()

    bad = admin.post("/api/v1/sso/rules", {**body, "match": "regex", "value": "(unclosed"},
                     content_type="application/json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "value"
    bad = admin.post("/api/v1/sso/rules", {**body, "grant": "admin"},
                     content_type="application/json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "team"
    bad = admin.post("/api/v1/sso/rules", {**body, "team": None},
                     content_type="application/json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "team"

    changed = admin.patch(f"/api/v1/sso/rules/{rule_id}", {"grant": "member"},
                          content_type="application/json")
    assert changed.json()["grant"] == "member"
    assert admin.delete(f"/api/v1/sso/rules/{rule_id}").status_code == 204
    assert [e.action for e in AuditEntry.objects.filter(object_id=str(rule_id)).order_by("id")
            ] == ["sso_rule.create", "sso_rule.change", "sso_rule.delete"]
    assert MappingRule.objects.count() == 0 and vision.pk


def test_the_preview_says_what_a_rule_would_do_and_saves_nothing():
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    saved = _rule(1, "vision", "member", vision, is_billing=True)
    _login(sub="a", groups=["vision", "nlp"])
    _login(sub="b", groups=["vision"])
    stale = _login(sub="old", groups=["vision", "nlp"]).user
    ExternalIdentity.objects.filter(user=stale).update(
        last_login_at=timezone.now() - timedelta(days=40))
    admin = Client()
    admin.force_login(AdminFactory())

    rows = admin.post("/api/v1/sso/rules/preview", {"rule": {
        "position": 2, "claim": "groups", "match": "equals", "value": "nlp", "grant": "lead",
        "team": "nlp", "is_billing": True}}, content_type="application/json").json()

    assert {r["user"]: (r["started"], r["refused"]) for r in rows} == {
        "user-a": (["lead of NLP (billing)"],
                   "login refused: two billing teams (NLP and Vision)"),
        "user-b": ([], "")}
    assert MappingRule.objects.count() == 1
    one = admin.post("/api/v1/sso/rules/preview", {"user": "user-b", "rule_id": saved.pk, "rule": {
        "value": "nothing-matches"}}, content_type="application/json").json()
    assert one == [{"user": "user-b", "provider": "kc", "last_login_at": one[0]["last_login_at"],
                    "started": [], "ended": ["member of Vision (billing)"], "admin": "",
                    "refused": "", "kept": ""}]
    page = admin.get("/manage/sso/preview/", {"value": "nlp", "grant": "member", "team": nlp.pk,
                                              "position": 5, "claim": "groups",
                                              "match": "equals", "with_candidate": "on"})
    assert page.status_code == 200 and "member of NLP" in page.content.decode()
    outsider = Client()
    outsider.force_login(UserFactory())
    assert outsider.get("/manage/sso/preview/").status_code == 404


def _login_error(username: str, password: str) -> str:
    response = Client().post("/accounts/login/", {"username": username, "password": password})
    assert response.status_code == 200
    errors = re.search(r'<div class="errors">(.*?)</div>', response.content.decode(), re.S)
    return re.sub(r"<[^>]+>|\s+", " ", errors[1]).strip()


@pytest.mark.parametrize("with_provider", [False, True])
def test_local_passwords_limited_to_break_glass_refuse_everyone_else_with_one_message(
        settings, with_provider):
    """A refused password says the same whoever tried: a break-glass name with a wrong
    password, another local account with its right one, a name nobody has. Which names are
    break-glass accounts is never told."""
    from accounts.sso.conf import OidcProvider

    settings.GPUQUOTA_LOCAL_LOGIN_USERS = "root"
    if with_provider:
        settings.GPUQUOTA_OIDC_PROVIDERS = [OidcProvider(
            name="kc", label="Keycloak", issuer="https://kc.example.org", client_id="g",
            client_secret="s")]
    AdminFactory(username="root")
    UserFactory(username="carol")
    answers = {_login_error("root", "wrong"), _login_error("carol", "password"),
               _login_error("nobody", "password")}
    assert len(answers) == 1, answers
    assert "only for break-glass accounts" in answers.pop()
    assert Client().post("/accounts/login/", {"username": "root", "password": "password"}
                         ).status_code == 302


def test_refused_logins_wait_on_the_admins_home_page():
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    admin = Client()
    admin.force_login(AdminFactory())
    assert "People refused at login" not in admin.get("/").content.decode()
    _rule(1, "vision", "member", vision, is_billing=True)
    _rule(2, "nlp", "member", nlp, is_billing=True)
    _login(groups=[])  # the user exists: the refusal is audited on them
    with pytest.raises(LoginRefused):
        _login(groups=["vision", "nlp"])
    assert "People refused at login by the sign-in rules" in admin.get("/").content.decode()


def test_logins_in_the_second_a_role_changes_see_the_successor_dated_a_second_ahead(
        time_machine):
    """Membership times are whole seconds: a lead made and ended in one second ends a second
    later, and its successor starts then; later logins in that second must keep it, not
    start another one over it (the overlap would refuse them)."""
    vision = TeamFactory(slug="vision", name="Vision")
    _rule(1, "vision-leads", "lead", vision)
    _rule(2, "vision", "member", vision)
    time_machine.move_to(timezone.now().replace(microsecond=100), tick=False)
    user = _login(groups=["vision-leads", "vision"]).user
    assert _login(groups=["vision"]).ended == ["lead of Vision"]
    again = _login(groups=["vision"])
    assert (again.started, again.ended) == ([], [])
    back = _login(groups=["vision-leads", "vision"])  # and back again, still that second
    assert (back.started, back.ended) == (["lead of Vision"], ["member of Vision"])
    ordered = Membership.objects.filter(user=user).order_by("valid_from")
    assert [m.role for m in ordered] == ["lead", "member", "lead"]
    assert ordered.last().valid_until is None
