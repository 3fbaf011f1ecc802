import unicodedata
import zoneinfo

from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q

from gpuquota.core.constraints import NoOverlap
from gpuquota.core.fields import WholeSecondDateTimeField
from gpuquota.core.names import (
    dns1123_label_error,
    slurm_name_error,
    team_slug_validate,
    unix_user_error,
)


def validate_timezone(value: str) -> None:
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value!r} is not a known IANA time zone (e.g. Europe/Berlin)")


def validate_cost_center(value: str) -> None:
    """Any code a finance system uses, as printable text: no control characters (a line
    break would split a CSV row or a mail header) and no spaces at either end. What it may
    start with is the export's business (CSV cells are neutralised, PDF and mail escaped)."""
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value):
        raise ValidationError("A cost center is printable text: no control characters or "
                              "line breaks.")
    if value != value.strip():
        raise ValidationError("A cost center has no spaces at either end.")


class User(AbstractUser):
    """A person. Platform admins are staff users."""

    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    email_opt_out = models.BooleanField(
        default=False,
        help_text="Receive no email from gpuquota (statements still reach leads' peers).",
    )
    is_finance = models.BooleanField(
        "finance", default=False,
        help_text="Reads every team's statements, the review, exports, budgets and the FOCUS "
        "export; no reservations, no admin pages (docs/chargeback.md, The finance role).")


class Team(models.Model):
    name = models.CharField(max_length=120, unique=True)
    slug = models.SlugField(
        max_length=64, unique=True, validators=[team_slug_validate],
        help_text="Lower-case letters, digits and '-', at most 60: it names the team's "
        "Kubernetes queues (gq-<slug>) and labels.")
    cost_center = models.CharField(
        "cost-center code", max_length=64, blank=True, validators=[validate_cost_center],
        help_text="What finance books the team's statements to; statements keep the code "
                  "they were drafted with.")
    cost_center_owner_email = models.EmailField(
        "cost-center owner", blank=True,
        help_text="Who owns the cost center at finance: copied on the team's statement mail.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user in a team with a role over [valid_from, valid_until); at most one billing
    team per user at any instant."""

    class Role(models.TextChoices):
        LEAD = "lead", "Team lead"
        MEMBER = "member", "Member"

    class Source(models.TextChoices):
        HAND = "hand", "By hand"
        RULES = "rules", "By the mapping rules"

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    is_billing = models.BooleanField(
        "billing team",
        default=False,
        help_text="Unreserved usage of this user is billed to this team.",
    )
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True, help_text="Empty: open-ended.")
    source = models.CharField(
        max_length=16, choices=Source.choices, default=Source.HAND,
        help_text="Made by hand (left alone by the mapping rules) or by the identity "
        "provider's groups (started and ended by the rules at each login).")

    class Meta:
        ordering = ["team__name", "user__username", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=["lead", "member"]), name="membership_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(source__in=["hand", "rules"]), name="membership_source_valid"
            ),
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
                name="membership_interval_valid",
            ),
            NoOverlap(name="membership_no_overlap", key=["user", "team"]),
            NoOverlap(
                name="membership_one_billing_team",
                key=["user"],
                condition=Q(is_billing=True),
                violation_error_message="A user has at most one billing team at any instant.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ClusterIdentity(models.Model):
    """What an agent sees on one cluster, mapped to a user or a team over an interval."""

    class Kind(models.TextChoices):
        UNIX_USER = "unix_user", "Unix user name"
        UNIX_UID = "unix_uid", "Unix uid"
        SLURM_ACCOUNT = "slurm_account", "Slurm account"
        K8S_NAMESPACE = "k8s_namespace", "Kubernetes namespace"

    USER_KINDS = (Kind.UNIX_USER, Kind.UNIX_UID)

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="identities"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    key = models.CharField(max_length=256, help_text="The user name, uid, account or namespace.")
    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="cluster_identities"
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.PROTECT, related_name="cluster_identities"
    )
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "cluster identities"
        ordering = ["cluster__name", "kind", "key", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["unix_user", "unix_uid", "slurm_account", "k8s_namespace"]),
                name="identity_kind_valid",
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind__in=["unix_user", "unix_uid"], user__isnull=False, team__isnull=True)
                    | Q(
                        kind__in=["slurm_account", "k8s_namespace"],
                        user__isnull=True,
                        team__isnull=False,
                    )
                ),
                name="identity_maps_user_or_team",
                violation_error_message="Unix users and uids map to a user; Slurm accounts and "
                "Kubernetes namespaces map to a team.",
            ),
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
                name="identity_interval_valid",
            ),
            NoOverlap(name="identity_no_overlap", key=["cluster", "kind", "key"]),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.get_kind_display()} {self.key} → {self.user or self.team}"

    def clean(self) -> None:
        """A Kubernetes namespace is a DNS-1123 label, a Slurm account and a unix user name
        follow Slurm's grammar (no comma, space, quote or shell character, no leading `-`;
        `root` and the `gq-` prefix reserved): checked where they enter (the admin form,
        identity_save, an identity provider's claims), so no refused name reaches a
        cluster, and the refusal says why."""
        error = None
        if self.kind == self.Kind.K8S_NAMESPACE:
            error = dns1123_label_error(self.key, what="A Kubernetes namespace")
        elif self.kind == self.Kind.SLURM_ACCOUNT:
            error = slurm_name_error(self.key, what="A Slurm account")
        elif self.kind == self.Kind.UNIX_USER:
            error = unix_user_error(self.key, what="A unix user name")
        if error:
            raise ValidationError({"key": error})


class ApiToken(models.Model):
    """A personal API token (`Authorization: Bearer gqu_...`), stored hashed; issued and
    revoked only by accounts.services."""

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="api_tokens")
    name = models.CharField(max_length=120)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=~Q(prefix="") & ~Q(key_hash=""),
                                   name="api_token_prefix_and_hash_set"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class ExternalIdentity(models.Model):
    """Who a user is at an identity provider: (issuer, subject), never an email. Name and
    email are refreshed from it at each login; `last_claims` keeps what the mapping rules
    read, for their preview."""

    class Source(models.TextChoices):
        OIDC = "oidc", "OpenID Connect"
        LDAP = "ldap", "LDAP directory"

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="external_identities")
    source = models.CharField(max_length=8, choices=Source.choices)
    provider = models.CharField(max_length=64, help_text="The configured provider's name.")
    issuer = models.CharField(max_length=512)
    subject = models.CharField(max_length=255)
    first_login_at = models.DateTimeField()
    last_login_at = models.DateTimeField()
    last_claims = models.JSONField(default=dict, blank=True)
    admin_by_rules = models.BooleanField(
        default=False, help_text="The user is a platform admin because a rule said so.")
    disabled_at = models.DateTimeField(
        null=True, blank=True,
        help_text="Set when the provider no longer knows the account: its API tokens stop.")
    disabled_reason = models.CharField(max_length=200, blank=True)
    claims_unread = models.JSONField(
        default=dict, blank=True,
        help_text="The claims a mapping rule could not read at the last login (withheld by "
        "the provider, as Entra ID's group overage, or not names), with why: the teams "
        "those rules decide were kept as they were.")

    class Meta:
        verbose_name_plural = "external identities"
        ordering = ["provider", "subject"]
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"],
                                    name="external_identity_issuer_subject_unique"),
            models.CheckConstraint(condition=Q(source__in=["oidc", "ldap"]),
                                   name="external_identity_source_valid"),
            models.CheckConstraint(condition=~Q(issuer="") & ~Q(subject=""),
                                   name="external_identity_issuer_subject_set"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}: {self.subject} → {self.user}"


class MappingRule(models.Model):
    """One ordered rule: when a claim (or LDAP group) of a login matches, grant platform
    admin, or lead/member of a team (optionally its billing team). Applied at every login."""

    class Match(models.TextChoices):
        EQUALS = "equals", "Equals"
        GLOB = "glob", "Matches the pattern (* and ?)"
        REGEX = "regex", "Matches the regular expression"

    class Grant(models.TextChoices):
        ADMIN = "admin", "Platform admin"
        LEAD = "lead", "Team lead"
        MEMBER = "member", "Member"

    position = models.PositiveIntegerField(
        help_text="Rules are read in this order; for one team, the first match decides.")
    provider = models.CharField(max_length=64, blank=True,
                                help_text="Only logins through this provider; empty: any.")
    claim = models.CharField(max_length=255, default="groups",
                             help_text="The claim read: groups, roles, any named claim or a "
                             "dotted path into objects (realm_access.roles); LDAP logins offer "
                             "groups (names), group_dns and the user's attributes.")
    match = models.CharField(max_length=8, choices=Match.choices, default=Match.EQUALS)
    value = models.CharField(max_length=255)
    grant = models.CharField(max_length=8, choices=Grant.choices)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="mapping_rules")
    is_billing = models.BooleanField("billing team", default=False)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(match__in=["equals", "glob", "regex"]),
                                   name="mapping_rule_match_valid"),
            models.CheckConstraint(
                condition=(Q(grant="admin", team__isnull=True, is_billing=False)
                           | Q(grant__in=["lead", "member"], team__isnull=False)),
                name="mapping_rule_grant_valid",
                violation_error_message="Admin rules name no team; lead and member rules "
                "name one."),
            models.CheckConstraint(condition=~Q(value="") & ~Q(claim=""),
                                   name="mapping_rule_claim_value_set"),
        ]

    def __str__(self) -> str:
        target = self.team or "platform"
        return f"#{self.position} {self.claim} {self.match} {self.value!r} → " \
               f"{self.get_grant_display()} of {target}"


class ClaimShape(models.Model):
    """A claim's path and the shape of its value in logins through a provider lately,
    never the value itself: what the mapping rules' save check knows of the claims
    providers send (accounts.sso.shapes), kept GPUQUOTA_SSO_CLAIM_SHAPES_DAYS."""

    class Shape(models.TextChoices):
        NAME = "name", "a name"
        NAMES = "names", "a list of names"
        OBJECT = "object", "an object"
        OBJECTS = "objects", "a list of objects"
        LIST = "list", "a list holding other things than names"
        OTHER = "other", "true/false or a number with a fraction"
        NULL = "null", "null"
        WITHHELD = "withheld", "withheld by the provider (a link to it instead)"

    provider = models.CharField(max_length=64)
    path = models.CharField(max_length=255)
    shape = models.CharField(max_length=8, choices=Shape.choices)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["provider", "path", "shape"]
        indexes = [models.Index(fields=["last_seen_at"], name="claim_shape_last_seen")]
        constraints = [
            models.UniqueConstraint(fields=["provider", "path", "shape"],
                                    name="claim_shape_provider_path_shape_unique"),
            models.CheckConstraint(condition=Q(shape__in=["name", "names", "object", "objects",
                                                          "list", "other", "null",
                                                          "withheld"]),
                                   name="claim_shape_shape_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}: {self.path} ({self.shape})"


class IdentityLinkRequest(models.Model):
    """A first login through a provider whose vouched email is already a gpuquota user's:
    held, never made a second account, until a platform admin links it to that user (or
    refuses). One per (issuer, subject)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for an admin"
        LINKED = "linked", "Linked"
        REFUSED = "refused", "Refused"

    source = models.CharField(max_length=8, choices=ExternalIdentity.Source.choices)
    provider = models.CharField(max_length=64)
    issuer = models.CharField(max_length=512)
    subject = models.CharField(max_length=255)
    email = models.EmailField(max_length=254)
    username = models.CharField(max_length=150, blank=True,
                                help_text="The user name the provider proposed.")
    claims = models.JSONField(default=dict, blank=True)
    requested_at = models.DateTimeField()
    last_attempt_at = models.DateTimeField()
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="link_requests", help_text="The user it was linked to.")
    decided_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_attempt_at"]
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"],
                                    name="identity_link_request_issuer_subject_unique"),
            models.CheckConstraint(condition=Q(status__in=["pending", "linked", "refused"]),
                                   name="identity_link_request_status_valid"),
            models.CheckConstraint(
                condition=Q(status="linked", user__isnull=False)
                | Q(~Q(status="linked"), user__isnull=True),
                name="identity_link_request_linked_names_user",
                violation_error_message="A linked request names its user; others none."),
        ]

    def __str__(self) -> str:
        return f"{self.provider}: {self.email} ({self.get_status_display()})"
