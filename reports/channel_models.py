"""The channels besides a team's (`reports.models.TeamChannel`): the platform admins' and a
user's own, kept in a module of their own so the statements' models stay readable;
`reports.models` imports them, so Django finds them there."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class ChannelKind(models.TextChoices):
    """What a channel posts to (a team's, the admins' or a user's)."""

    SLACK = "slack", "Slack"
    TEAMS = "teams", "Microsoft Teams"
    WEBHOOK = "webhook", "Webhook (signed)"


class ChannelBase(models.Model):
    """What every channel is, a team's, the admins' or a user's: where it posts (`kind`,
    the sealed URL and signing secret, `gpuquota.outbox.sealing`; pages show `url_host`
    only), whether it is on, and its name in the outbox (`target`)."""

    TARGET_PREFIX = ""

    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    name = models.CharField(max_length=80)
    url_sealed = models.TextField()
    url_host = models.CharField(max_length=255)
    secret_sealed = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    created_at = WholeSecondDateTimeField()

    class Meta:
        abstract = True

    @property
    def target(self) -> str:
        """The outbox's name for this channel."""
        return f"{self.TARGET_PREFIX}:{self.pk}"


class AdminChannel(ChannelBase):
    """A channel of the platform's admins (the organisation's): what waits for them or
    broke, whatever team it concerns (`gpuquota.outbox.events.ADMIN_EVENTS`). Sealed and
    guarded like a team's channel (`reports.models.TeamChannel`)."""

    TARGET_PREFIX = "admin-channel"

    events = models.JSONField(
        default=list, blank=True,
        help_text="The event types it hears (gpuquota.outbox.events.ADMIN_EVENTS); empty: all.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="+")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="admin_channel_name_unique"),
            models.CheckConstraint(condition=Q(kind__in=["slack", "teams", "webhook"]),
                                   name="admin_channel_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"admins {self.kind} {self.name}"


class UserChannel(ChannelBase):
    """A user's own channel: a Slack or Teams incoming webhook or a signed webhook that hears
    the user's own events (`gpuquota.outbox.events.USER_EVENTS`: their jobs' zero-use
    warnings and waste). Sealed and guarded like a team's channel (`reports.models.TeamChannel`)."""

    TARGET_PREFIX = "user-channel"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                             related_name="channels")
    events = models.JSONField(
        default=list, blank=True,
        help_text="The event types it hears (gpuquota.outbox.events.USER_EVENTS); empty: all.")

    class Meta:
        ordering = ["user", "name"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="user_channel_name_unique"),
            models.CheckConstraint(condition=Q(kind__in=["slack", "teams", "webhook"]),
                                   name="user_channel_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.kind} {self.name}"
