"""The one place that says who may see and do what.

- admin (staff): everything;
- team lead: act for their teams, see their teams' data;
- member: read their teams' data;
- finance (`User.is_finance`): read every team's statements, the review, the exports,
  budgets and the FOCUS export; nothing else of a team (no reservations, no team page)
  and no admin page;
- anyone else: nothing of a team's data, answered as 404 so a team's existence
  does not leak.

Every view, API view and admin action asks these predicates.
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework.permissions import BasePermission

from accounts.models import Membership, Team, User
from accounts.selectors import memberships_current


def is_admin(user: User) -> bool:
    """A platform admin: an active staff user."""
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def is_finance(user: User) -> bool:
    """The read-only finance role: an active user marked `is_finance`."""
    return bool(user.is_authenticated and user.is_active and getattr(user, "is_finance", False))


def reads_all_statements(user: User) -> bool:
    """Admins and finance: every team's statements, budgets and exports."""
    return is_admin(user) or is_finance(user)


def can_view_team(user: User, team: Team) -> bool:
    """Admins, and current members (any role) of the team."""
    if is_admin(user):
        return True
    return user.is_authenticated and memberships_current(user=user).filter(team=team).exists()


def can_act_for_team(user: User, team: Team) -> bool:
    """Admins, and current leads of the team."""
    if is_admin(user):
        return True
    return (
        user.is_authenticated
        and memberships_current(user=user).filter(team=team, role=Membership.Role.LEAD).exists()
    )


def is_lead_anywhere(user: User) -> bool:
    """Leads at least one team now (or is an admin): may open the reservation form."""
    return is_admin(user) or (
        user.is_authenticated
        and memberships_current(user=user).filter(role=Membership.Role.LEAD).exists()
    )


def team_for_view(user: User, slug: str) -> Team:
    """The team named by `slug` if the user may read it; 404 otherwise (no leak)."""
    team = Team.objects.filter(slug=slug).first()
    if team is None or not can_view_team(user, team):
        raise Http404("No such team.")
    return team


def team_for_statements(user: User, slug: str) -> Team:
    """The team named by `slug` if the user may read its statements and budget (its
    members, admins, finance); 404 otherwise."""
    team = Team.objects.filter(slug=slug).first()
    if team is None or not (is_finance(user) or can_view_team(user, team)):
        raise Http404("No such team.")
    return team


def require_statements_reader(user: User) -> None:
    """The statements review: admins and finance; 404 for anyone else."""
    if not reads_all_statements(user):
        raise Http404("Not found.")


def team_for_action(user: User, slug: str) -> Team:
    """The team named by `slug` if the user may act for it: 404 when they may not
    even see it, 403 when they may see but not act (a member)."""
    team = team_for_view(user, slug)
    if not can_act_for_team(user, team):
        raise PermissionDenied("Only the team's leads and admins can do this.")
    return team


def require_admin(user: User) -> None:
    """404 for anonymous users and non-admins alike (admin pages do not advertise)."""
    if not is_admin(user):
        raise Http404("Not found.")


class IsPlatformAdmin(BasePermission):
    """DRF: admins only."""

    def has_permission(self, request, view) -> bool:
        return is_admin(request.user)
