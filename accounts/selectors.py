from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import ApiToken, ClusterIdentity, Membership, Team, User


def _valid_at(at: datetime) -> Q:
    return Q(valid_from__lte=at) & (Q(valid_until__isnull=True) | Q(valid_until__gt=at))


def memberships_current(*, user: User, at: datetime | None = None) -> QuerySet[Membership]:
    """The user's memberships in force at `at` (default now)."""
    if not user.is_authenticated:
        return Membership.objects.none()
    return Membership.objects.filter(_valid_at(at or timezone.now()), user=user)


def memberships_not_ended(*, user: User, at: datetime | None = None) -> QuerySet[Membership]:
    """The user's memberships in force at `at` (default now) or starting after it."""
    at = at or timezone.now()
    return Membership.objects.filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at),
                                     user=user)


def teams_visible(*, user: User) -> QuerySet[Team]:
    """Teams whose data the user may read: all for admins, else current memberships."""
    if not user.is_authenticated:
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    ids = memberships_current(user=user).values("team_id")
    return Team.objects.filter(id__in=ids)


def teams_billed_visible(*, user: User) -> QuerySet[Team]:
    """Teams whose statements, budgets and exports the user may read: all for admins and
    finance, else current memberships."""
    if user.is_authenticated and user.is_active and getattr(user, "is_finance", False):
        return Team.objects.all()
    return teams_visible(user=user)


def teams_led(*, user: User) -> QuerySet[Team]:
    """Teams the user may act for: all for admins, else those they currently lead."""
    if not user.is_authenticated:
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    ids = memberships_current(user=user).filter(role=Membership.Role.LEAD).values("team_id")
    return Team.objects.filter(id__in=ids)


def team_members(*, team: Team, at: datetime | None = None) -> QuerySet[Membership]:
    """Memberships of the team in force at `at` (default now), leads first."""
    return (
        Membership.objects.filter(_valid_at(at or timezone.now()), team=team)
        .select_related("user")
        .order_by("role", "user__username")
    )


def team_leads(*, team: Team, at: datetime | None = None) -> list[User]:
    """The team's leads at `at` (default now)."""
    return [m.user for m in team_members(team=team, at=at).filter(role=Membership.Role.LEAD)]


def billing_team(*, user: User, at: datetime) -> Team | None:
    """The user's billing team at `at`, if any (at most one by constraint)."""
    membership = (
        Membership.objects.filter(_valid_at(at), user=user, is_billing=True)
        .select_related("team")
        .first()
    )
    return membership.team if membership else None


def identity_resolve(
    *, cluster_id: int, kind: str, key: str, at: datetime
) -> ClusterIdentity | None:
    """The cluster identity mapping `key` of `kind` on that cluster at `at`, if any."""
    return (
        ClusterIdentity.objects.filter(_valid_at(at), cluster_id=cluster_id, kind=kind, key=key)
        .select_related("user", "team")
        .first()
    )


def platform_admins() -> QuerySet[User]:
    """Every platform admin (active staff user): who is told of what waits for an admin."""
    return User.objects.filter(is_staff=True, is_active=True).order_by("username")


def api_tokens_live(*, user: User | None = None, now: datetime | None = None
                    ) -> QuerySet[ApiToken]:
    """Tokens that authenticate now (not revoked, not expired), of `user` or everyone."""
    now = now or timezone.now()
    qs = ApiToken.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now),
                                 revoked_at__isnull=True)
    return qs if user is None else qs.filter(user=user)


def api_tokens_of(*, user: User) -> QuerySet[ApiToken]:
    """Every token of the user, newest first, revoked and expired ones included."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
