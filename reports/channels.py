"""A team's notification channels (Slack, Microsoft Teams, a signed webhook) and their
delivery through the notification outbox (`gpuquota.outbox.notifications`).

A channel's URL is checked when it is added, and again on the address actually connected
to at every delivery, by the network guard telemetry sources use
(`gpuquota.telemetry.netguard`), with the channels' own allowed networks
(`GPUQUOTA_CHANNEL_ALLOWED_NETWORKS`): no loopback, private, link-local (the cloud metadata
service) or other non-public address unless the site lists it; no credentials in the URL;
redirects are not followed."""

from datetime import datetime
from urllib.parse import urlsplit

import requests
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Team, User
from accounts.permissions import can_act_for_team
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.services import audit_record
from gpuquota.outbox.events import TEAM_EVENTS, TEST_EVENT, event_heard, events_choice_clean
from gpuquota.outbox.models import Notification
from gpuquota.outbox.notifications import SendOutcome, notification_queue, notifications_send_due
from gpuquota.outbox.render import Message
from gpuquota.outbox.sealing import seal, unseal, webhook_secret_new
from gpuquota.telemetry import netguard
from reports import conf
from reports.models import TeamChannel

SETTING = "GPUQUOTA_CHANNEL_ALLOWED_NETWORKS"


def channel_address_refusal(address: str) -> str | None:
    """Why a channel may not connect to `address`, or None."""
    return netguard.address_refusal(
        address, networks=netguard._networks(conf.channel_allowed_networks_raw()),
        setting=SETTING, who="notification channels")


def channel_session() -> requests.Session:
    """An HTTP session whose every connection passes `channel_address_refusal`."""
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment: the guard sees the real peer
    adapter = netguard.adapter_for(channel_address_refusal)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def channel_endpoint_checked(*, kind: str, name: str, url: str) -> tuple[str, str]:
    """The channel's name and URL, stripped, or a `DomainError` naming the field: a known
    kind, a printable name, a URL the network guard lets through."""
    if kind not in TeamChannel.Kind.values:
        raise DomainError(f"One of: {', '.join(TeamChannel.Kind.values)}.", field="kind")
    name = (name or "").strip()
    if not name or len(name) > 80 or not name.isprintable():
        raise DomainError("A name of 1 to 80 printable characters.", field="name")
    url = (url or "").strip()
    if len(url) > 2000:
        raise DomainError("At most 2000 characters.", field="url")
    why = netguard.url_refusal(url, refusal=channel_address_refusal)
    if why:
        raise DomainError(f"This URL cannot be used: {why}.", field="url")
    return name, url


def channel_events_checked(events, *, known: dict[str, str]) -> list[str]:
    """The event types chosen, each a known one (`gpuquota.outbox.events`); [] is all."""
    try:
        return events_choice_clean(events, known=known)
    except ValueError as exc:
        raise DomainError(str(exc), field="events") from None


def channel_add(*, team: Team, kind: str, name: str, url: str, by: User,
                events: list[str] | None = None,
                now: datetime | None = None) -> tuple[TeamChannel, str]:
    """Add a channel to the team (its leads, admins): the URL checked and sealed, the
    events it hears checked (none chosen: all); for a webhook, a new signing secret,
    returned here once (the receiver verifies with it)."""
    if not can_act_for_team(by, team):
        raise NotFound("No such team.")
    name, url = channel_endpoint_checked(kind=kind, name=name, url=url)
    events = channel_events_checked(events, known=TEAM_EVENTS)
    if TeamChannel.objects.filter(team=team, name=name).exists():
        raise DomainError("The team has a channel of that name.", field="name")
    secret = webhook_secret_new() if kind == TeamChannel.Kind.WEBHOOK else ""
    now = (now or timezone.now()).replace(microsecond=0)
    with transaction.atomic():
        channel = TeamChannel.objects.create(
            team=team, kind=kind, name=name, url_sealed=seal(url),
            url_host=urlsplit(url).hostname or "", secret_sealed=seal(secret),
            events=events, created_by=by, created_at=now)
        audit_record(actor=by, action="channel.add", obj=channel, team=team,
                     changes={"kind": kind, "name": name, "host": channel.url_host,
                              "events": events})
    return channel, secret


def channel_queue(channel, *, key: str, message: Message,
                  now: datetime | None = None) -> Notification | None:
    """Queue `message` to one channel (a team's, the admins' or a user's) under `key`, in the
    caller's transaction; None when queued already."""
    return notification_queue(key=key, target=channel.target, kind=channel.kind,
                              url=unseal(channel.url_sealed), message=message,
                              secret=unseal(channel.secret_sealed), now=now)


def channel_test_deliver(channel, *, message: Message, now: datetime) -> Notification:
    """A "send test" message to one channel, delivered now (the sweep retries a failure)."""
    with transaction.atomic():
        row = channel_queue(channel, key=f"test:{channel.pk}:{now.timestamp():.6f}",
                            message=message, now=now)
    notifications_send_due(session=channel_session(), now=now, ids=[row.pk])
    row.refresh_from_db()
    return row


def channel_events_store(channel, *, events: list[str], known: dict[str, str], by: User,
                         action: str, team: Team | None = None):
    """Check and store the event types a channel of any kind hears (none: all), audited."""
    events = channel_events_checked(events, known=known)
    with transaction.atomic():
        before = channel.events
        type(channel).objects.filter(pk=channel.pk).update(events=events)
        channel.events = events
        audit_record(actor=by, action=action, obj=channel, team=team,
                     changes={"events": {"from": before, "to": events}})
    return channel


def channel_switch_off(channel, *, by: User, action: str, team: Team | None = None) -> None:
    """Switch a channel of any kind off (its delivery history stays), audited."""
    with transaction.atomic():
        type(channel).objects.filter(pk=channel.pk).update(active=False)
        audit_record(actor=by, action=action, obj=channel, team=team)


def channel_events_set(*, channel: TeamChannel, events: list[str], by: User) -> TeamChannel:
    """Choose the event types the channel hears (none: all), each a team event type."""
    if not can_act_for_team(by, channel.team):
        raise NotFound("No such channel.")
    return channel_events_store(channel, events=events, known=TEAM_EVENTS, by=by,
                                action="channel.events", team=channel.team)


def channel_remove(*, channel: TeamChannel, by: User) -> None:
    """Switch a channel off (its delivery history stays)."""
    if not can_act_for_team(by, channel.team):
        raise NotFound("No such channel.")
    channel_switch_off(channel, by=by, action="channel.remove", team=channel.team)


def channels_notify(*, team: Team, key: str, message: Message,
                    now: datetime | None = None) -> int:
    """Queue `message` to every active channel of the team under `key` (once per channel),
    in the caller's transaction; the outbox's sweep delivers them. Returns rows queued."""
    return channels_team_event(team_id=team.pk, key=key, message=message, now=now)


def channels_team_event(*, team_id: int, key: str, message: Message,
                        now: datetime | None = None) -> int:
    """The `TEAM_EVENT` hook: `channels_notify` for a team known by its id (the apps below
    reports tell of their events this way); a channel that chose its events hears those."""
    queued = 0
    for channel in TeamChannel.objects.filter(team_id=team_id, active=True):
        if not event_heard(message.event, chosen=channel.events):
            continue
        queued += channel_queue(channel, key=key, message=message, now=now) is not None
    return queued


def channel_test(*, channel: TeamChannel, by: User, now: datetime | None = None) -> Notification:
    """The "send test" button: a test message to this channel, delivered now (and retried
    by the sweep if it fails)."""
    if not can_act_for_team(by, channel.team):
        raise NotFound("No such channel.")
    now = now or timezone.now()
    message = Message(event=TEST_EVENT, title=f"gpuquota test for {channel.team.name}",
                      text=f"{by.username} sent this test to the channel {channel.name}.",
                      data={"team": channel.team.slug, "channel": channel.name})
    return channel_test_deliver(channel, message=message, now=now)


def channels_send_due(*, now: datetime | None = None) -> SendOutcome:
    """Deliver every due notification of the outbox (beat: every minute)."""
    return notifications_send_due(session=channel_session(), now=now)


def channel_deliveries(*, team: Team, limit: int = 20) -> QuerySet[Notification]:
    """The latest deliveries to the team's channels, newest first."""
    targets = [c.target for c in TeamChannel.objects.filter(team=team)]
    return Notification.objects.filter(target__in=targets).order_by("-created_at", "-id")[:limit]
