"""A login through an identity provider, all or nothing: the user of (issuer, subject),
their name and email, their memberships and admin flag by the mapping rules, their cluster
identities. A refused login changes nothing but the audit, the admins' mail and the
claims' paths and shapes the rules' save check reads (accounts.sso.shapes)."""

import json
import logging
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
from accounts.sso.claims import claim_read
from accounts.sso.errors import LoginRefused
from accounts.sso.links import link_request_hold
from accounts.sso.mapping import Grants, grants_for
from accounts.sso.notify import sso_mail
from accounts.sso.shapes import claim_shapes_record
from gpuquota.core.names import unix_user_error
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster

logger = logging.getLogger(__name__)
#: A unix uid a claim may give: not root's, below the "no uid" of 32 bits (-1).
UID_MAX = 2**32 - 2
#: Claims never kept with the last login: `_claim_sources` may carry access tokens.
CLAIMS_NOT_KEPT = frozenset({"_claim_sources", "nonce", "at_hash", "c_hash"})
CLAIM_KEPT_MAX = 16384


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
    identities_refused: list[str] = field(default_factory=list)
    #: claim: why it could not be read; the memberships it decides were kept
    unread: dict[str, str] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)


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
    # a hand-made membership stays whatever the rules say, and so does a rule-made one of
    # a team whose rule could not read its claim
    kept = {m.team_id: m for m in current if m.source == Membership.Source.HAND
            or m.team_id in grants.uncertain_teams}
    teams = {g.team_id: g.team_name for g in grants.billing_teams() if g.team_id not in kept}
    teams.update({m.team_id: m.team.name for m in kept.values() if m.is_billing})
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
        sso_mail(template="sso_billing_conflict", recipients=platform_admins(),
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
        if membership.source == Membership.Source.RULES and team_id in grants.uncertain_teams:
            outcome.kept.append(_label(membership.team.name, membership.role,
                                       membership.is_billing))
            continue
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


def _uid_error(value: str) -> str | None:
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= UID_MAX:
        return f"A unix uid is a whole number from 1 to {UID_MAX}, not {value[:40]!r}."
    return None


def _cluster_key(kind: str, claim: str, claims: dict) -> tuple[str, str]:
    """The key of `kind` the claim gives (or ''), and why it is refused (or '')."""
    read = claim_read(claims, claim)
    if read.problem or not read.values:
        return "", read.problem
    value = read.values[0]
    if kind == ClusterIdentity.Kind.UNIX_USER:
        error = unix_user_error(value, what=f"The unix user name {value[:40]!r}")
    else:
        error = _uid_error(value)
    return ("", error) if error else (value, "")


def _cluster_identities_ensure(*, user: User, claims: dict, now: datetime,
                               outcome: LoginOutcome) -> None:
    """The user's unix user name and uid, from the configured claims, on every cluster;
    a key already mapped to someone else is left to the admins, and a value that is no
    valid name or uid (`zed,root`) becomes no identity: it is logged and audited."""
    wanted = [(ClusterIdentity.Kind.UNIX_USER, conf.cluster_user_claim()),
              (ClusterIdentity.Kind.UNIX_UID, conf.cluster_uid_claim())]
    for kind, claim in wanted:
        if not claim:
            continue
        key, refused = _cluster_key(kind, claim, claims)
        if refused:
            outcome.identities_refused.append(f"{kind} from “{claim}”: {refused}")
            logger.warning("sso: no %s identity for %s from the claim %r: %s", kind,
                           user.username, claim, refused)
            continue
        if not key:
            continue
        for cluster in Cluster.objects.all():
            held = (ClusterIdentity.objects.filter(cluster=cluster, kind=kind, key=key)
                    .filter(valid_from__lte=now).exclude(valid_until__lte=now).first())
            if held is not None:
                continue
            identity_save(identity=ClusterIdentity(
                cluster=cluster, kind=kind, key=key, user=user, valid_from=now),
                actor=None)
            outcome.identities.append(f"{cluster.slug}:{kind}:{key}")


def _admin_apply(*, user: User, identity: ExternalIdentity, grants: Grants) -> None:
    if grants.admin_uncertain:  # a rule that could not read its claim: left as it is
        return
    if grants.admin and not user.is_staff:
        user.is_staff, identity.admin_by_rules = True, True
    elif not grants.admin and identity.admin_by_rules:
        user.is_staff, identity.admin_by_rules = False, False


def sso_login(*, login: ProviderLogin) -> LoginOutcome:
    """The user of (issuer, subject) after this login: created the first time (unless its
    vouched address is an existing account's: then held for an admin to link), name and
    email refreshed, memberships and admin flag as the active mapping rules say (those a
    rule cannot read its claim for kept), cluster identities created. Raises LoginRefused,
    changing no user, for a login to refuse."""
    if not login.issuer or not login.subject:
        raise LoginRefused("The provider's answer names no subject (sub): the login is "
                           "refused; ask its admin.", field="sub")
    now = _now()
    claim_shapes_record(provider=login.provider, claims=login.claims, now=now)
    rules = list(MappingRule.objects.filter(is_active=True).select_related("team"))
    grants = grants_for(rules=rules, claims=login.claims, provider=login.provider)
    found = (ExternalIdentity.objects.select_related("user")
             .filter(issuer=login.issuer, subject=login.subject).first())
    if found is not None and not found.user.is_active:
        raise LoginRefused("This account is disabled in gpuquota; ask an admin.")
    if found is None and login.email:
        link_request_hold(source=login.source, provider=login.provider, issuer=login.issuer,
                          subject=login.subject, email=login.email, username=login.username,
                          claims=claims_kept(login.claims), now=now)
    teams = _billing_conflict(user=found.user if found else None, grants=grants, now=now)
    if teams:
        _refuse_billing(login=login, user=found.user if found else None, teams=teams)
    try:
        outcome = _login_apply(login=login, grants=grants, now=now)
    except (ValidationError, IntegrityError) as exc:
        raise LoginRefused(f"This login would break a rule of gpuquota's data ({exc}); "
                           "nothing was changed. Ask an admin.") from exc
    if outcome.unread:
        _unread_tell(login=login, outcome=outcome, now=now)
    return outcome


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
    identity.last_claims = claims_kept(login.claims)
    identity.claims_unread = dict(grants.unread)
    identity.disabled_at, identity.disabled_reason = None, ""
    identity.save()
    outcome = LoginOutcome(user=user, unread=dict(grants.unread))
    _memberships_reconcile(user=user, grants=grants, now=now, outcome=outcome)
    _cluster_identities_ensure(user=user, claims=login.claims, now=now, outcome=outcome)
    audit_record(actor=user, action="sso.user_create" if created else "sso.login", obj=user,
                 changes={"provider": login.provider, "subject": login.subject,
                          "started": outcome.started, "ended": outcome.ended,
                          "kept": outcome.kept, "unread": outcome.unread,
                          "admin": user.is_staff, "identities": outcome.identities,
                          "identities_refused": outcome.identities_refused})
    if outcome.identities_refused:
        audit_record(actor=None, action="sso.cluster_name_refused", obj=user,
                     reason="; ".join(outcome.identities_refused),
                     changes={"provider": login.provider, "refused": outcome.identities_refused})
    return outcome


def claims_kept(claims: dict) -> dict:
    """The claims kept with a login for the rules' preview, objects included; none that
    may carry a secret or is larger than CLAIM_KEPT_MAX once written as JSON."""
    kept = {}
    for name, value in claims.items():
        if name in CLAIMS_NOT_KEPT:
            continue
        try:
            size = len(json.dumps(value))
        except (TypeError, ValueError):
            continue
        if size <= CLAIM_KEPT_MAX:
            kept[name] = value
    return kept


def _unread_tell(*, login: ProviderLogin, outcome: LoginOutcome, now: datetime) -> None:
    """Tell the user and the admins, once a day per problem, that a claim the rules read
    could not be read and which memberships were kept for it."""
    user = outcome.user
    context = {"who": user.username, "provider": login.provider, "kept": outcome.kept,
               "unread": [f"{claim}: {why}" for claim, why in sorted(outcome.unread.items())]}
    key = (f"sso-claims-unread:{login.issuer}:{login.subject}:"
           f"{'+'.join(sorted(outcome.unread))}:{now.date().isoformat()}")
    with transaction.atomic():
        audit_record(actor=None, action="sso.claims_unread", obj=user,
                     changes={"provider": login.provider, "unread": outcome.unread,
                              "kept": outcome.kept})
        sso_mail(template="sso_claims_unread", recipients=platform_admins(), context=context,
                 key=key)
        sso_mail(template="sso_claims_unread_you", recipients=[user], context=context,
                 key=f"{key}:you")


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
