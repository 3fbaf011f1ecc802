from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from accounts.models import ApiToken, ClusterIdentity, Membership, User
from gpuquota.core.services import audit_record
from gpuquota.core.tokens import token_generate
from gpuquota.usage.services import identity_change_mark_dirty, membership_change_mark_dirty


@transaction.atomic
def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """A new personal API token; the plain key is returned once and never stored."""
    new = token_generate("u")
    token = ApiToken.objects.create(user=user, name=name, prefix=new.prefix, key_hash=new.key_hash)
    audit_record(actor=user, action="api_token.create", obj=token, changes={"name": name})
    return token, new.key


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
    # The database's exclusion constraints hold on PostgreSQL; this gives the
    # friendly message there and the rule itself on SQLite.
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
    membership.full_clean()
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
