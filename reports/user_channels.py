"""A user's own channels: Slack, Teams or a signed webhook that a user adds on their profile
page to hear their own events (`gpuquota.outbox.events.USER_EVENTS`: their jobs' zero-use
warnings, the stop, and the note about a wasteful job), told by the apps below through the
core hook `USER_EVENT` (`gpuquota.core.contributions.user_event`). Each user manages only
their own; the same network guard, sealing and outbox as a team's channels
(`reports.channels`)."""

from datetime import datetime
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import User
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.services import audit_record
from gpuquota.outbox.events import TEST_EVENT, USER_EVENTS, event_heard
from gpuquota.outbox.models import Notification
from gpuquota.outbox.render import Message
from gpuquota.outbox.sealing import seal, webhook_secret_new
from reports.channels import (
    channel_endpoint_checked,
    channel_events_checked,
    channel_events_store,
    channel_queue,
    channel_switch_off,
    channel_test_deliver,
)
from reports.models import TeamChannel, UserChannel


def _own(channel: UserChannel, by: User) -> None:
    if channel.user_id != by.pk:
        raise NotFound("No such channel.")


def user_channel_add(*, user: User, kind: str, name: str, url: str,
                     events: list[str] | None = None,
                     now: datetime | None = None) -> tuple[UserChannel, str]:
    """Add one of the user's own channels: the URL checked and sealed, the events checked
    (none chosen: all); for a webhook, its signing secret, returned here once."""
    name, url = channel_endpoint_checked(kind=kind, name=name, url=url)
    events = channel_events_checked(events, known=USER_EVENTS)
    if UserChannel.objects.filter(user=user, name=name).exists():
        raise DomainError("You have a channel of that name.", field="name")
    secret = webhook_secret_new() if kind == TeamChannel.Kind.WEBHOOK else ""
    now = (now or timezone.now()).replace(microsecond=0)
    with transaction.atomic():
        channel = UserChannel.objects.create(
            user=user, kind=kind, name=name, url_sealed=seal(url),
            url_host=urlsplit(url).hostname or "", secret_sealed=seal(secret), events=events,
            created_at=now)
        audit_record(actor=user, action="user_channel.add", obj=channel,
                     changes={"kind": kind, "name": name, "host": channel.url_host,
                              "events": events})
    return channel, secret


def user_channel_events_set(*, channel: UserChannel, events: list[str],
                            by: User) -> UserChannel:
    """Choose the user event types the channel hears (none: all); its owner only."""
    _own(channel, by)
    return channel_events_store(channel, events=events, known=USER_EVENTS, by=by,
                                action="user_channel.events")


def user_channel_remove(*, channel: UserChannel, by: User) -> None:
    """Switch one of the user's channels off (its delivery history stays)."""
    _own(channel, by)
    channel_switch_off(channel, by=by, action="user_channel.remove")


def user_channels_event(*, user_id: int, key: str, message: Message,
                        now: datetime | None = None) -> int:
    """The `USER_EVENT` hook: queue `message` to each active channel of the user that hears
    its event, under `key` (once per channel), in the caller's transaction. Rows queued."""
    queued = 0
    for channel in UserChannel.objects.filter(user_id=user_id, active=True):
        if event_heard(message.event, chosen=channel.events):
            queued += channel_queue(channel, key=key, message=message, now=now) is not None
    return queued


def user_channel_test(*, channel: UserChannel, by: User,
                      now: datetime | None = None) -> Notification:
    """The profile's "send test": a test message delivered now (the sweep retries it)."""
    _own(channel, by)
    now = now or timezone.now()
    message = Message(event=TEST_EVENT, title=f"gpuquota test for {by.username}",
                      text=f"{by.username} sent this test to their channel {channel.name}.",
                      data={"user": by.username, "channel": channel.name})
    return channel_test_deliver(channel, message=message, now=now)


def user_channel_deliveries(*, user: User, limit: int = 20) -> QuerySet[Notification]:
    """The latest deliveries to the user's channels, newest first."""
    targets = [c.target for c in UserChannel.objects.filter(user=user)]
    return Notification.objects.filter(target__in=targets).order_by("-created_at", "-id")[:limit]
