"""The platform admins' channels (the organisation's): Slack, Teams or a signed webhook that
hears what waits for the admins or broke, whatever team it concerns
(`gpuquota.outbox.events.ADMIN_EVENTS`), told by the apps below through the core hook
`ADMIN_EVENT` (`gpuquota.core.contributions.admin_event`). Added, tested and removed by
admins only; the same network guard, sealing and outbox as a team's channels
(`reports.channels`)."""

from datetime import datetime
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import User
from accounts.permissions import is_admin
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.services import audit_record
from gpuquota.outbox.events import ADMIN_EVENTS, TEST_EVENT, event_heard
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
from reports.models import AdminChannel, TeamChannel


def _require_admin(by: User) -> None:
    if not is_admin(by):
        raise NotFound("Not found.")


def admin_channel_add(*, kind: str, name: str, url: str, by: User,
                      events: list[str] | None = None,
                      now: datetime | None = None) -> tuple[AdminChannel, str]:
    """Add a channel of the admins (admins only): the URL checked and sealed, the events
    checked (none chosen: all); for a webhook, its signing secret, returned here once."""
    _require_admin(by)
    name, url = channel_endpoint_checked(kind=kind, name=name, url=url)
    events = channel_events_checked(events, known=ADMIN_EVENTS)
    if AdminChannel.objects.filter(name=name).exists():
        raise DomainError("The admins have a channel of that name.", field="name")
    secret = webhook_secret_new() if kind == TeamChannel.Kind.WEBHOOK else ""
    now = (now or timezone.now()).replace(microsecond=0)
    with transaction.atomic():
        channel = AdminChannel.objects.create(
            kind=kind, name=name, url_sealed=seal(url), url_host=urlsplit(url).hostname or "",
            secret_sealed=seal(secret), events=events, created_by=by, created_at=now)
        audit_record(actor=by, action="admin_channel.add", obj=channel,
                     changes={"kind": kind, "name": name, "host": channel.url_host,
                              "events": events})
    return channel, secret


def admin_channel_events_set(*, channel: AdminChannel, events: list[str],
                             by: User) -> AdminChannel:
    """Choose the admin event types the channel hears (none: all)."""
    _require_admin(by)
    return channel_events_store(channel, events=events, known=ADMIN_EVENTS, by=by,
                                action="admin_channel.events")


def admin_channel_remove(*, channel: AdminChannel, by: User) -> None:
    """Switch an admins' channel off (its delivery history stays)."""
    _require_admin(by)
    channel_switch_off(channel, by=by, action="admin_channel.remove")


def admin_channels_event(*, key: str, message: Message, now: datetime | None = None) -> int:
    """The `ADMIN_EVENT` hook: queue `message` to every active admins' channel that hears
    its event, under `key` (once per channel), in the caller's transaction. Rows queued."""
    queued = 0
    for channel in AdminChannel.objects.filter(active=True):
        if event_heard(message.event, chosen=channel.events):
            queued += channel_queue(channel, key=key, message=message, now=now) is not None
    return queued


def admin_channel_test(*, channel: AdminChannel, by: User,
                       now: datetime | None = None) -> Notification:
    """The admin page's "send test": a test message delivered now (the sweep retries it)."""
    _require_admin(by)
    now = now or timezone.now()
    message = Message(event=TEST_EVENT, title="gpuquota test for the admins",
                      text=f"{by.username} sent this test to the admins' channel {channel.name}.",
                      data={"channel": channel.name})
    return channel_test_deliver(channel, message=message, now=now)


def admin_channel_deliveries(*, limit: int = 30) -> QuerySet[Notification]:
    """The latest deliveries to the admins' channels, newest first."""
    targets = [c.target for c in AdminChannel.objects.all()]
    return Notification.objects.filter(target__in=targets).order_by("-created_at", "-id")[:limit]
