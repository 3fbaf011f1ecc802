"""A login through an identity provider, all or nothing: the user of (issuer, subject),
their name and email, their memberships and admin flag by the mapping rules, their cluster
identities. A refused login changes nothing but the audit and the admins' mail."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import ClusterIdentity, ExternalIdentity, MappingRule, Membership, User
from accounts.selectors import memberships_current, memberships_not_ended, platform_admins
from accounts.services import identity_save, membership_save
from accounts.sso import conf
from accounts.sso.mapping import Grants, claim_values, grants_for
from gpuquota.core.errors import DomainError
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.mail.outbox import mail_send_later


class LoginRefused(DomainError):
    """A login refused with a message the person can act on; nothing was changed."""

    status_code = 403
    code = "login_refused"


@dataclass
class ProviderLogin:
    """What a provider vouched for: who (issuer, subject) and the claims the rules read."""

    source: str
    provider: str
    issuer: str
    subject: str
    claims: dict
    username: str = ""
    email: str = ""
    first_name: str = ""
    last_name: str = ""


@dataclass
class LoginOutcome:
    user: User
    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    identities: list[str] = field(default_factory=list)


def _now() -> datetime:
    return timezone.now().replace(microsecond=0)


def _username_free(wanted: str, provider: str) -> str:
    """A user name for a new account: never an existing one (names are not identities)."""
    base = "".join(c for c in wanted if c.isalnum() or c in "@.+-_")[:100] or provider
    candidates = [base, f"{base}-{provider}"] + [f"{base}-{provider}-{n}" for n in range(2, 50)]
    taken = set(User.objects.filter(username__in=candidates).values_list("username", flat=True))
    name = next((c for c in candidates if c not in taken), None)
    if name is None:
        raise LoginRefused(f"No free user name for “{base}”; ask an admin.")
    UnicodeUsernameValidator()(name)
    return name


def _label(team_name: str, role: str, billing: bool) -> str:
    return f"{role} of {team_name}" + (" (billing)" if billing else "")


def _billing_conflict(*, user: User | None, grants: Grants, now: datetime) -> list[str]:
    """Names of the billing teams the user would have at once after this login."""
    current = list(memberships_current(user=user, at=now).select_related("team")) \
        if user is not None else []
    by_hand = {m.team_id: m for m in current if m.source == Membership.Source.HAND}
    # a grant for a team the user is in by hand changes nothing: the hand-made one stays
    teams = {g.team_id: g.team_name for g in grants.billing_teams() if g.team_id not in by_hand}
    teams.update({m.team_id: m.team.name for m in by_hand.values() if m.is_billing})
    return sorted(teams.values()) if len(teams) > 1 else []


def _refuse_billing(*, login: ProviderLogin, user: User | None, teams: list[str]) -> None:
    """Record the refusal and tell the admins, in a transaction of its own."""
    who = login.username or login.subject
    message = (f"Your login would make you a billing member of two teams at once "
               f"({' and '.join(teams)}); an admin has been told and must fix the mapping rules "
               f"or your groups.")
    with transaction.atomic():
        if user is not None:
            audit_record(actor=None, action="sso.login_refused", obj=user, reason=message,
                         changes={"provider": login.provider, "billing_teams": teams})
        mail_send_later(template="sso_billing_conflict", recipients=platform_admins(),
                        context={"who": who, "provider": login.provider, "teams": teams},
                        key=f"sso-billing-conflict:{login.issuer}:{login.subject}:"
                            f"{'+'.join(teams)}:{_now().date().isoformat()}")
    raise LoginRefused(message, field="groups")


def _memberships_reconcile(*, user: User, grants: Grants, now: datetime,
                           outcome: LoginOutcome) -> None:
    """End the rule-made memberships the rules no longer grant (dated, never deleted), then
    start those they grant; hand-made memberships are left alone. Per team the one to
    reconcile is the latest not ended at `now`: times are whole seconds, so a membership
    started and ended in one second ends a second later and its successor starts then;
    a later login in that second must see that successor, not start another over it."""
    current = {m.team_id: m for m in memberships_not_ended(user=user, at=now)
               .select_related("team").order_by("valid_from")}
    for team_id, membership in current.items():
        grant = grants.teams.get(team_id)
        if membership.source != Membership.Source.RULES or (
                grant and (grant.role, grant.is_billing) == (membership.role,
                                                             membership.is_billing)):
            continue
        membership.valid_until = max(now, membership.valid_from + timedelta(seconds=1))
        membership_save(membership=membership, actor=None)
        outcome.ended.append(_label(membership.team.name, membership.role,
                                    membership.is_billing))
    for team_id, grant in grants.teams.items():
        membership = current.get(team_id)
        if membership is not None and (membership.source == Membership.Source.HAND or (
                (grant.role, grant.is_billing) == (membership.role, membership.is_billing))):
            continue
        start = now if membership is None else max(now, membership.valid_until)
        membership_save(membership=Membership(
            user=user, team_id=team_id, role=grant.role, is_billing=grant.is_billing,
            valid_from=start, source=Membership.Source.RULES), actor=None)
        outcome.started.append(_label(grant.team_name, grant.role, grant.is_billing))


def _cluster_identities_ensure(*, user: User, claims: dict, now: datetime,
                               outcome: LoginOutcome) -> None:
    """The user's unix user name and uid, from the configured claims, on every cluster;
    a key already mapped to someone else is left to the admins."""
    wanted = [(ClusterIdentity.Kind.UNIX_USER, conf.cluster_user_claim()),
              (ClusterIdentity.Kind.UNIX_UID, conf.cluster_uid_claim())]
    for kind, claim in wanted:
        values = claim_values(claims, claim) if claim else []
        if not values:
            continue
        for cluster in Cluster.objects.all():
            held = (ClusterIdentity.objects.filter(cluster=cluster, kind=kind, key=values[0])
                    .filter(valid_from__lte=now).exclude(valid_until__lte=now).first())
            if held is not None:
                continue
            identity_save(identity=ClusterIdentity(
                cluster=cluster, kind=kind, key=values[0], user=user, valid_from=now),
                actor=None)
            outcome.identities.append(f"{cluster.slug}:{kind}:{values[0]}")


def _admin_apply(*, user: User, identity: ExternalIdentity, grants: Grants) -> None:
    if grants.admin and not user.is_staff:
        user.is_staff, identity.admin_by_rules = True, True
    elif not grants.admin and identity.admin_by_rules:
        user.is_staff, identity.admin_by_rules = False, False


def sso_login(*, login: ProviderLogin) -> LoginOutcome:
    """The user of (issuer, subject) after this login: created the first time, name and
    email refreshed, memberships and admin flag as the active mapping rules say, cluster
    identities created. Raises LoginRefused, changing nothing, for a login to refuse."""
    if not login.issuer or not login.subject:
        raise LoginRefused("The provider's answer names no subject (sub): the login is "
                           "refused; ask its admin.", field="sub")
    rules = list(MappingRule.objects.filter(is_active=True).select_related("team"))
    try:
        claim_values(login.claims, "groups")
        grants = grants_for(rules=rules, claims=login.claims, provider=login.provider)
    except DomainError as exc:
        raise LoginRefused(f"{exc.message} The login is refused.", field=exc.field) from exc
    now = _now()
    found = (ExternalIdentity.objects.select_related("user")
             .filter(issuer=login.issuer, subject=login.subject).first())
    if found is not None and not found.user.is_active:
        raise LoginRefused("This account is disabled in gpuquota; ask an admin.")
    teams = _billing_conflict(user=found.user if found else None, grants=grants, now=now)
    if teams:
        _refuse_billing(login=login, user=found.user if found else None, teams=teams)
    try:
        return _login_apply(login=login, grants=grants, now=now)
    except (ValidationError, IntegrityError) as exc:
        raise LoginRefused(f"This login would break a rule of gpuquota's data ({exc}); "
                           "nothing was changed. Ask an admin.") from exc


@transaction.atomic
def _login_apply(*, login: ProviderLogin, grants: Grants, now: datetime) -> LoginOutcome:
    identity = (ExternalIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=login.issuer, subject=login.subject).first())
    if identity is None:
        user = User(username=_username_free(login.username or login.email.split("@")[0]
                                            or slugify(login.subject), login.provider))
        user.set_unusable_password()
        identity = ExternalIdentity(source=login.source, provider=login.provider,
                                    issuer=login.issuer, subject=login.subject,
                                    first_login_at=now)
    else:
        user = identity.user
    user.email = login.email or user.email
    user.first_name = login.first_name[:150] or user.first_name
    user.last_name = login.last_name[:150] or user.last_name
    user.last_login = now
    _admin_apply(user=user, identity=identity, grants=grants)
    user.save()
    created = identity.pk is None
    identity.user, identity.provider, identity.last_login_at = user, login.provider, now
    identity.last_claims = {k: v for k, v in login.claims.items() if _keepable(v)}
    identity.disabled_at, identity.disabled_reason = None, ""
    identity.save()
    outcome = LoginOutcome(user=user)
    _memberships_reconcile(user=user, grants=grants, now=now, outcome=outcome)
    _cluster_identities_ensure(user=user, claims=login.claims, now=now, outcome=outcome)
    audit_record(actor=user, action="sso.user_create" if created else "sso.login", obj=user,
                 changes={"provider": login.provider, "subject": login.subject,
                          "started": outcome.started, "ended": outcome.ended,
                          "admin": user.is_staff, "identities": outcome.identities})
    return outcome


def _keepable(value) -> bool:
    if isinstance(value, str | int | bool):
        return len(str(value)) <= 512
    return isinstance(value, list) and len(value) <= 500 and all(
        isinstance(v, str | int) for v in value)


def sso_identities_check(*, now: datetime | None = None,
                         directory_active: set[str] | None = None) -> int:
    """Mark disabled the external identities whose provider no longer vouches for them:
    OIDC ones without a login for GPUQUOTA_SSO_TOKEN_REAUTH_DAYS, LDAP ones the directory
    no longer has (`directory_active`: subjects it has; None: directory not asked).
    Their users' API tokens stop working (accounts.services.api_token_use). Idempotent."""
    now = now or _now()
    marked = 0
    days = conf.token_reauth_days()
    live = ExternalIdentity.objects.filter(disabled_at__isnull=True)
    if days:
        stale = live.filter(source=ExternalIdentity.Source.OIDC,
                            last_login_at__lt=now - timedelta(days=days))
        marked += stale.update(disabled_at=now, disabled_reason=f"no login through the "
                               f"provider for {days} days")
    if directory_active is not None:
        gone = live.filter(source=ExternalIdentity.Source.LDAP).exclude(
            subject__in=directory_active)
        marked += gone.update(disabled_at=now, disabled_reason="no longer in the directory, "
                              "or disabled there")
    return marked
