"""What the ordered mapping rules grant for one login's claims: pure, no writes, so the
login and the preview read the very same answer."""

import fnmatch
import re
from dataclasses import dataclass, field

from accounts.models import MappingRule
from accounts.sso.claims import claim_read
from gpuquota.core.errors import DomainError


@dataclass(frozen=True)
class TeamGrant:
    team_id: int
    team_name: str
    role: str
    is_billing: bool
    rule_id: int | None


@dataclass
class Grants:
    """Platform admin or not, and for each team the role (the first matching rule for a
    team decides its role; any matching rule for it may make it the billing team)."""

    admin: bool = False
    teams: dict[int, TeamGrant] = field(default_factory=dict)
    #: The claims a rule read and could not (withheld by the provider, or not names), with
    #: why; the teams (id: name) and the admin flag such a rule decides are kept as they
    #: are, never ended for want of a claim nor refused.
    unread: dict[str, str] = field(default_factory=dict)
    uncertain_teams: dict[int, str] = field(default_factory=dict)
    admin_uncertain: bool = False

    def billing_teams(self) -> list[TeamGrant]:
        return [grant for grant in self.teams.values() if grant.is_billing]


def rule_matches(rule: MappingRule, values: list[str]) -> bool:
    if rule.match == MappingRule.Match.EQUALS:
        return rule.value in values
    if rule.match == MappingRule.Match.GLOB:
        return any(fnmatch.fnmatchcase(v, rule.value) for v in values)
    pattern = re.compile(rule.value)
    return any(pattern.fullmatch(v) for v in values)


def pattern_check(*, match: str, value: str) -> None:
    """Refuse a regular expression that does not compile (the rule's save and preview)."""
    if match == MappingRule.Match.REGEX:
        try:
            re.compile(value)
        except re.error as exc:
            raise DomainError(f"Not a regular expression: {exc}.", field="value") from exc


def grants_for(*, rules: list[MappingRule], claims: dict, provider: str) -> Grants:
    """What `rules` (in order, active ones only) grant a login with `claims`. A rule whose
    claim cannot be read leaves its team (or the admin flag) undecided, never refused."""
    grants = Grants()
    for rule in rules:
        if not rule.is_active or (rule.provider and rule.provider != provider):
            continue
        read = claim_read(claims, rule.claim)
        if read.problem:
            grants.unread[rule.claim] = read.problem
            if rule.grant == MappingRule.Grant.ADMIN:
                grants.admin_uncertain = True
            else:
                grants.uncertain_teams[rule.team_id] = rule.team.name
            continue
        if not rule_matches(rule, list(read.values)):
            continue
        if rule.grant == MappingRule.Grant.ADMIN:
            grants.admin = True
            continue
        earlier = grants.teams.get(rule.team_id)
        if earlier is None:
            grants.teams[rule.team_id] = TeamGrant(
                team_id=rule.team_id, team_name=rule.team.name, role=rule.grant,
                is_billing=rule.is_billing, rule_id=rule.pk)
        elif rule.is_billing and not earlier.is_billing:
            grants.teams[rule.team_id] = TeamGrant(**{**earlier.__dict__, "is_billing": True})
    for team_id in grants.uncertain_teams:
        grants.teams.pop(team_id, None)
    return grants
