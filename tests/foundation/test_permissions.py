"""The permission module against every role."""

import pytest

from accounts import permissions
from accounts.selectors import teams_led, teams_visible

pytestmark = pytest.mark.django_db

#                      admin  lead   other_lead member outsider anonymous finance
EXPECTED = {
    "is_admin": (True, False, False, False, False, False, False),
    "can_view_team": (True, True, False, True, False, False, False),
    "can_act_for_team": (True, True, False, False, False, False, False),
    "is_lead_anywhere": (True, True, True, False, False, False, False),
    "is_finance": (False, False, False, False, False, False, True),
    "reads_all_statements": (True, False, False, False, False, False, True),
}
ROLES = ("admin", "lead", "other_lead", "member", "outsider", "anonymous", "finance")


@pytest.mark.parametrize("predicate", EXPECTED)
@pytest.mark.parametrize("role_index,role", list(enumerate(ROLES)))
def test_predicates(roles, predicate, role_index, role):
    user = roles.users()[role]
    function = getattr(permissions, predicate)
    args = (user, roles.team) if predicate.endswith("_team") else (user,)
    assert function(*args) is EXPECTED[predicate][role_index]


@pytest.mark.parametrize(
    "role,visible,led",
    [
        ("admin", {"vision", "speech"}, {"vision", "speech"}),
        ("lead", {"vision"}, {"vision"}),
        ("other_lead", {"speech"}, {"speech"}),
        ("member", {"vision"}, set()),
        ("outsider", set(), set()),
        ("anonymous", set(), set()),
        ("finance", set(), set()),  # statements of every team, not the teams' other data
    ],
)
def test_team_selectors(roles, role, visible, led):
    user = roles.users()[role]
    assert {t.slug for t in teams_visible(user=user)} == visible
    assert {t.slug for t in teams_led(user=user)} == led


def test_expired_membership_grants_nothing(roles):
    from django.utils import timezone

    roles.member.memberships.update(valid_until=timezone.now())
    assert not permissions.can_view_team(roles.member, roles.team)


@pytest.mark.parametrize(
    "role,status",
    [
        ("admin", 200),
        ("lead", 200),
        ("member", 200),
        ("other_lead", 404),
        ("outsider", 404),
        ("anonymous", 302),
    ],
)
def test_team_page_by_role(client, roles, role, status):
    user = roles.users()[role]
    if user.is_authenticated:
        client.force_login(user)
    response = client.get(f"/teams/{roles.team.slug}/")
    assert response.status_code == status
    if status == 200:
        assert b"Vision" in response.content


def test_unknown_team_and_hidden_team_look_the_same(client, roles):
    client.force_login(roles.outsider)
    assert client.get("/teams/vision/").status_code == client.get("/teams/nope/").status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_me_endpoint(client, roles, role):
    user = roles.users()[role]
    if user.is_authenticated:
        client.force_login(user)
    response = client.get("/api/v1/me")
    if not user.is_authenticated:
        assert response.status_code in (401, 403)
        assert set(response.json()) == {"code", "detail", "errors"}
        return
    assert response.status_code == 200
    assert response.json()["is_admin"] is (role == "admin")
