"""The mapping rules' writes (audited) and their preview: what a set of rules would do to
one user, or to everyone who logged in through a provider lately, before it is saved."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts.models import (
    ExternalIdentity,
    IdentityLinkRequest,
    MappingRule,
    Membership,
    User,
)
from accounts.selectors import memberships_current
from accounts.sso.mapping import grants_for, pattern_check
from accounts.sso.shapes import rule_claim_review
from gpuquota.core.attention import Attention
from gpuquota.core.errors import DomainError
from gpuquota.core.models import AuditEntry
from gpuquota.core.services import audit_record

PREVIEW_DAYS = 30


def _rule_changes(rule: MappingRule) -> dict:
    return {"position": rule.position, "provider": rule.provider, "claim": rule.claim,
            "match": rule.match, "value": rule.value, "grant": rule.grant,
            "team": rule.team.slug if rule.team else None, "is_billing": rule.is_billing,
            "is_active": rule.is_active}


def mapping_rule_check(rule: MappingRule) -> None:
    """Refuse a rule that cannot work, with the field at fault."""
    pattern_check(match=rule.match, value=rule.value)
    if rule.grant == MappingRule.Grant.ADMIN and (rule.team_id or rule.is_billing):
        raise DomainError("An admin rule names no team and no billing flag.", field="team")
    if rule.grant != MappingRule.Grant.ADMIN and not rule.team_id:
        raise DomainError("A lead or member rule names its team.", field="team")
    try:
        rule.full_clean()
    except ValidationError as exc:
        field_name, errors = next(iter(exc.message_dict.items()))
        raise DomainError(errors[0], field=None if field_name == "__all__" else field_name) \
            from exc
    problem = rule_claim_review(rule=rule, now=timezone.now()).problem
    if problem:
        raise DomainError(problem, field="claim")


def mapping_rule_warnings(rule: MappingRule) -> list[dict]:
    """What is worth saying of a rule that passes its check, each with the field it is
    about: its claim carried by no recent login, or withheld at each."""
    review = rule_claim_review(rule=rule, now=timezone.now())
    return [{"field": "claim", "message": message} for message in review.warnings]


@transaction.atomic
def mapping_rule_save(*, rule: MappingRule, actor: User) -> MappingRule:
    """Create or change a rule; audited with its new content. Applied at the next logins."""
    mapping_rule_check(rule)
    created = rule.pk is None
    rule.save()
    audit_record(actor=actor, action="sso_rule.create" if created else "sso_rule.change",
                 obj=rule, team=rule.team, changes=_rule_changes(rule))
    return rule


@transaction.atomic
def mapping_rule_delete(*, rule: MappingRule, actor: User) -> None:
    """Remove a rule; the memberships it granted end at each user's next login."""
    audit_record(actor=actor, action="sso_rule.delete", obj=rule, team=rule.team,
                 changes=_rule_changes(rule))
    rule.delete()


@dataclass
class PreviewRow:
    user: User
    provider: str
    last_login_at: datetime
    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    admin: str = ""
    refused: str = ""
    kept: str = ""

    @property
    def changes(self) -> bool:
        return bool(self.started or self.ended or self.admin or self.refused or self.kept)


def _describe(team_name: str, role: str, billing: bool) -> str:
    return f"{role} of {team_name}" + (" (billing)" if billing else "")


def _kept(grants, current: dict) -> str:
    """What a login keeps as it is because a rule could not read its claim, and why."""
    teams = sorted(name for team_id, name in grants.uncertain_teams.items()
                   if team_id in current)
    what = teams + (["the admin flag"] if grants.admin_uncertain else [])
    why = "; ".join(f"{claim}: {reason}" for claim, reason in sorted(grants.unread.items()))
    return f"kept as they are ({', '.join(what) or 'nothing yet'}): {why}"


def _preview_one(identity: ExternalIdentity, rules: list[MappingRule], now: datetime
                 ) -> PreviewRow:
    row = PreviewRow(user=identity.user, provider=identity.provider,
                     last_login_at=identity.last_login_at)
    grants = grants_for(rules=rules, claims=identity.last_claims, provider=identity.provider)
    current = {m.team_id: m for m in memberships_current(user=identity.user, at=now)
               .select_related("team")}
    kept = {t for t, m in current.items() if m.source == Membership.Source.HAND
            or t in grants.uncertain_teams}
    billing = {g.team_name for g in grants.billing_teams() if g.team_id not in kept}
    for team_id, m in current.items():
        grant = grants.teams.get(team_id)
        if team_id in kept:
            billing |= {m.team.name} if m.is_billing else set()
        elif grant is None or (grant.role, grant.is_billing) != (m.role, m.is_billing):
            row.ended.append(_describe(m.team.name, m.role, m.is_billing))
    for team_id, grant in grants.teams.items():
        m = current.get(team_id)
        if m is None or (m.source == Membership.Source.RULES and (grant.role, grant.is_billing)
                         != (m.role, m.is_billing)):
            row.started.append(_describe(grant.team_name, grant.role, grant.is_billing))
    if not grants.admin_uncertain and grants.admin and not identity.user.is_staff:
        row.admin = "becomes a platform admin"
    elif not grants.admin_uncertain and not grants.admin and identity.admin_by_rules:
        row.admin = "is no longer a platform admin"
    if grants.unread:
        row.kept = _kept(grants, current)
    if len(billing) > 1:
        row.refused = f"login refused: two billing teams ({' and '.join(sorted(billing))})"
    return row


def rules_preview(*, rules: list[MappingRule], user: User | None = None,
                  now: datetime | None = None) -> list[PreviewRow]:
    """What `rules` would do at the next login of `user` (each of their provider accounts),
    or of everyone who logged in through a provider in the last 30 days, read from the
    claims of their last login. Writes nothing."""
    now = now or timezone.now()
    identities = ExternalIdentity.objects.select_related("user").order_by("user__username")
    if user is not None:
        identities = identities.filter(user=user)
    else:
        identities = identities.filter(last_login_at__gte=now - timedelta(days=PREVIEW_DAYS))
    return [_preview_one(identity, rules, now) for identity in identities]


def rules_with_candidate(*, candidate: MappingRule | None) -> list[MappingRule]:
    """The saved rules, with `candidate` (new, or replacing the saved one of its id) in its
    place by position: what the rules would be once it is saved."""
    rules = [r for r in MappingRule.objects.select_related("team")
             if candidate is None or r.pk != candidate.pk]
    if candidate is not None:
        rules.append(candidate)
    return sorted(rules, key=lambda r: (r.position, r.pk or 0))


def sso_attention(now: datetime) -> list[Attention]:
    """What single sign-on leaves to the admins: provider logins refused in the last 7 days
    (two billing teams), people whose last login a rule could not read (memberships kept),
    first logins waiting to be linked to an existing account, and unix names or uids from
    a claim refused in the last 7 days. Nothing of a kind that never happened."""
    items = []
    if AuditEntry.objects.filter(action="sso.login_refused").exists():
        refused = AuditEntry.objects.filter(action="sso.login_refused",
                                            at__gte=now - timedelta(days=7))
        items.append(Attention(
            key="sso-refused", label="People refused at login by the sign-in rules",
            count=refused.values("object_id").distinct().count(),
            url=reverse("sso_rules_preview"),
            detail="two billing teams at once, in the last 7 days", order=60))
    unread = ExternalIdentity.objects.exclude(claims_unread={})
    if unread.exists():
        items.append(Attention(
            key="sso-unread", label="People whose groups the provider did not send readably",
            count=unread.count(), url=reverse("sso_rules_preview"),
            detail="their memberships are kept as they were; see the preview", order=61))
    waiting = IdentityLinkRequest.objects.filter(status=IdentityLinkRequest.Status.PENDING)
    if waiting.exists():
        items.append(Attention(
            key="sso-links", label="First sign-ins waiting to be linked to an account",
            count=waiting.count(), url=reverse("sso_links"),
            detail="their provider vouches for an existing account's address", order=62))
    names = AuditEntry.objects.filter(action="sso.cluster_name_refused",
                                      at__gte=now - timedelta(days=7))
    if names.exists():
        items.append(Attention(
            key="sso-names", label="Unix names or uids from sign-in claims refused",
            count=names.values("object_id").distinct().count(),
            url=reverse("admin:core_auditentry_changelist")
            + "?action__exact=sso.cluster_name_refused",
            detail="no cluster identity was made from them; in the last 7 days", order=63))
    return items
