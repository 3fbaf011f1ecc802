from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import (
    ApiToken,
    ClusterIdentity,
    Membership,
    Team,
    User,
    validate_cost_center,
)
from accounts.permissions import is_admin
from accounts.selectors import api_tokens_live
from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.services import audit_record
from gpuquota.core.tokens import token_generate, token_hash
from gpuquota.outbox.services import identity_change_mark_dirty, membership_change_mark_dirty

MAX_LIVE_API_TOKENS = 50


def _token_name_clean(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise DomainError("Give the token a name (what will use it).", field="name")
    if len(name) > 120 or "\x00" in name:
        raise DomainError("A name of at most 120 characters, without NUL.", field="name")
    return name


@transaction.atomic
def api_token_create(*, user: User, name: str, expires_at: datetime | None = None,
                     now: datetime | None = None) -> tuple[ApiToken, str]:
    """A new named personal API token for `user`, optionally expiring; the plain key is
    returned this once and only its hash is stored. The only way tokens are issued."""
    now = now or timezone.now()
    name = _token_name_clean(name)
    if expires_at is not None and expires_at <= now:
        raise DomainError("The expiry must be in the future.", field="expires_at")
    User.objects.select_for_update().filter(pk=user.pk).first()  # one issue at a time
    if api_tokens_live(user=user, now=now).count() >= MAX_LIVE_API_TOKENS:
        raise DomainError(f"At most {MAX_LIVE_API_TOKENS} live tokens: revoke one first.",
                          field="name")
    new = token_generate("u")
    token = ApiToken.objects.create(user=user, name=name, prefix=new.prefix,
                                    key_hash=new.key_hash, expires_at=expires_at)
    audit_record(actor=user, action="api_token.create", obj=token, changes={
        "name": name, "prefix": new.prefix,
        "expires_at": expires_at.isoformat() if expires_at else None})
    return token, new.key


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor: User, now: datetime | None = None) -> ApiToken:
    """Revoke a token from now on: its owner, or an admin for anyone's. Idempotent."""
    if actor.pk != token.user_id and not is_admin(actor):
        raise PermissionDenied("Only the token's owner or an admin can revoke it.")
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = now or timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="api_token.revoke", obj=token, changes={
            "name": token.name, "prefix": token.prefix, "user": token.user.username})
    return token


def api_token_use(*, key: str, now: datetime | None = None) -> ApiToken | None:
    """The live token (not revoked, not expired, of an active user none of whose provider
    accounts is disabled: accounts.sso) with this key, its last use recorded now; None for
    any other key."""
    now = now or timezone.now()
    token = (api_tokens_live(now=now).select_related("user")
             .filter(key_hash=token_hash(key), user__is_active=True)
             .exclude(user__external_identities__disabled_at__isnull=False).first())
    if token is not None:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def _overlapping(queryset, start: datetime, end: datetime | None):
    overlap = Q(valid_until__isnull=True) | Q(valid_until__gt=start)
    if end is not None:
        overlap &= Q(valid_from__lt=end)
    return queryset.filter(overlap)


def _span(*intervals: tuple[datetime, datetime | None]) -> tuple[datetime, datetime | None]:
    """The smallest interval holding all of them (None: open-ended)."""
    start = min(s for s, _ in intervals)
    ends = [e for _, e in intervals]
    return start, None if None in ends else max(ends)


def _membership_check(membership: Membership) -> None:
    # The model's constraints, checked once here with friendly messages (full_clean would
    # ask the database for each: five queries more per membership, twice the overlaps).
    # The database's constraints still hold them; the overlaps only on PostgreSQL, where
    # these checks are the rule itself on SQLite.
    until = membership.valid_until
    if until is not None and membership.valid_from and until <= membership.valid_from:
        raise ValidationError({"valid_until": "A membership ends after it starts."})
    others = Membership.objects.exclude(pk=membership.pk)
    span = (membership.valid_from, membership.valid_until)
    if _overlapping(others.filter(user=membership.user, team=membership.team), *span).exists():
        raise ValidationError("This user already has a membership of this team in that interval.")
    if (
        membership.is_billing
        and _overlapping(others.filter(user=membership.user, is_billing=True), *span).exists()
    ):
        raise ValidationError({"is_billing": "A user has at most one billing team at any instant."})


@transaction.atomic
def membership_save(*, membership: Membership, actor: User) -> Membership:
    """Create or edit a membership; usage it re-attributes is marked for recompute."""
    membership.full_clean(validate_constraints=False)
    _membership_check(membership)
    old = Membership.objects.filter(pk=membership.pk).first() if membership.pk else None
    membership.save()
    intervals = [(membership.valid_from, membership.valid_until)]
    if old is not None:
        intervals.append((old.valid_from, old.valid_until))
        if old.user_id != membership.user_id:
            membership_change_mark_dirty(
                user_id=old.user_id, start=old.valid_from, end=old.valid_until
            )
    start, end = _span(*intervals)
    membership_change_mark_dirty(user_id=membership.user_id, start=start, end=end)
    audit_record(
        actor=actor,
        action="membership.create" if old is None else "membership.change",
        obj=membership,
        team=membership.team,
        changes={
            "user": membership.user.username,
            "role": membership.role,
            "is_billing": membership.is_billing,
            "valid_from": membership.valid_from.isoformat(),
            "valid_until": membership.valid_until.isoformat() if membership.valid_until else None,
        },
    )
    return membership


@transaction.atomic
def membership_delete(*, membership: Membership, actor: User) -> None:
    """Remove a membership entered by mistake; its usage is re-attributed."""
    membership_change_mark_dirty(
        user_id=membership.user_id, start=membership.valid_from, end=membership.valid_until
    )
    audit_record(
        actor=actor,
        action="membership.delete",
        obj=membership,
        team=membership.team,
        changes={"user": membership.user.username, "role": membership.role},
    )
    membership.delete()


def _identity_mark(identity: ClusterIdentity, start: datetime, end: datetime | None) -> None:
    identity_change_mark_dirty(
        cluster_id=identity.cluster_id, kind=identity.kind, key=identity.key, start=start, end=end
    )


@transaction.atomic
def identity_save(*, identity: ClusterIdentity, actor: User) -> ClusterIdentity:
    """Create or edit a cluster identity; usage it re-attributes is marked for recompute."""
    identity.full_clean()
    others = ClusterIdentity.objects.exclude(pk=identity.pk).filter(
        cluster=identity.cluster, kind=identity.kind, key=identity.key
    )
    if _overlapping(others, identity.valid_from, identity.valid_until).exists():
        raise ValidationError({"key": "This key is already mapped in that interval."})
    old = ClusterIdentity.objects.filter(pk=identity.pk).first() if identity.pk else None
    identity.save()
    if old is not None:
        _identity_mark(old, old.valid_from, old.valid_until)
    _identity_mark(identity, identity.valid_from, identity.valid_until)
    audit_record(
        actor=actor,
        action="identity.create" if old is None else "identity.change",
        obj=identity,
        team=identity.team,
        changes={
            "cluster": identity.cluster.slug,
            "kind": identity.kind,
            "key": identity.key,
            "user": identity.user.username if identity.user else None,
            "team": identity.team.slug if identity.team else None,
        },
    )
    return identity


@transaction.atomic
def identity_delete(*, identity: ClusterIdentity, actor: User) -> None:
    """Remove a cluster identity entered by mistake; its usage is re-attributed."""
    _identity_mark(identity, identity.valid_from, identity.valid_until)
    audit_record(
        actor=actor,
        action="identity.delete",
        obj=identity,
        team=identity.team,
        changes={"cluster": identity.cluster.slug, "kind": identity.kind, "key": identity.key},
    )
    identity.delete()


@transaction.atomic
def team_cost_center_set(*, team: Team, cost_center: str | None, actor: User,
                         owner_email: str | None = None) -> Team:
    """Set the team's cost center and/or its owner's email (admins; audited; None leaves
    one as it is): the next draft of each open month carries the code, approved statements
    keep theirs; the owner is copied on the team's statement mail."""
    if not is_admin(actor):
        raise PermissionDenied("Only admins set a team's cost center.", field="cost_center")
    team = Team.objects.select_for_update().get(pk=team.pk)
    changes = {}
    if cost_center is not None:
        try:
            validate_cost_center(cost_center)
        except ValidationError as exc:
            raise DomainError(exc.messages[0], field="cost_center") from exc
        if len(cost_center) > Team._meta.get_field("cost_center").max_length:
            raise DomainError("A cost center has at most 64 characters.", field="cost_center")
        if team.cost_center != cost_center:
            changes["cost_center"] = [team.cost_center, cost_center]
            team.cost_center = cost_center
    if owner_email is not None and owner_email != team.cost_center_owner_email:
        changes["cost_center_owner_email"] = [team.cost_center_owner_email, owner_email]
        team.cost_center_owner_email = owner_email
    if changes:
        team.save(update_fields=["cost_center", "cost_center_owner_email"])
        audit_record(actor=actor, action="team.cost_center", obj=team, team=team,
                     changes=changes)
    return team


@transaction.atomic
def finance_role_set(*, user: User, on: bool, actor: User | None = None) -> User:
    """Grant (or take back) the read-only finance role; audited. An admin's act on the
    Django admin page or `manage.py finance_role` (actor None: the command line)."""
    if user.is_finance != on:
        user.is_finance = on
        user.save(update_fields=["is_finance"])
        audit_record(actor=actor, action="user.finance_role", obj=user,
                     changes={"is_finance": on}, reason="" if actor else "manage.py finance_role")
    return user
