"""A lead chooses which events a team channel hears (docs/budgets.md, "Channels"): all by
default; a finance channel that chose `budget.threshold` and `statement.sent` hears those
and nothing else (the Send test still reaches it); the choice is checked against the one
list of event types, on the service and the team page, leads and admins only."""

from datetime import timedelta

import pytest
from django.test import Client

from accounts.models import Membership
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.outbox.events import ADMIN_EVENTS, TEAM_EVENTS
from gpuquota.outbox.models import Notification
from gpuquota.outbox.render import Message
from reports.channels import (
    channel_add,
    channel_events_set,
    channel_test,
    channels_notify,
    channels_send_due,
)
from reports.models import TeamChannel
from tests.factories import MembershipFactory, UserFactory
from tests.reports.receiver import Receiver
from tests.reservations.factories import NOW, Fleet

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
FINANCE = ["statement.sent", "budget.threshold"]


@pytest.fixture
def receiver(settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def fleet(clock, receiver):
    clock.move_to(NOW)
    return Fleet.create(vision_quota=1)


def _heard(channel) -> list[str]:
    return list(Notification.objects.filter(target=channel.target).order_by("id")
                .values_list("event", flat=True))


def test_a_finance_channel_hears_only_the_events_it_chose(fleet, receiver):
    everything, _ = channel_add(team=fleet.vision, kind="slack", name="all",
                                url=receiver.url + "/all", by=fleet.vision_lead)
    finance, _ = channel_add(team=fleet.vision, kind="teams", name="finance",
                             url=receiver.url + "/finance", by=fleet.vision_lead,
                             events=FINANCE)
    assert everything.events == [] and finance.events == ["budget.threshold", "statement.sent"]
    fleet.request(count=2)  # over quota: reservation.pending
    for event in ("budget.threshold", "statement.sent"):
        channels_notify(team=fleet.vision, key=f"k:{event}",
                        message=Message(event=event, title=event, text="."))
    assert _heard(everything) == ["reservation.pending", "budget.threshold", "statement.sent"]
    assert _heard(finance) == ["budget.threshold", "statement.sent"]
    channel_test(channel=finance, by=fleet.vision_lead, now=NOW)  # a test reaches it anyway
    assert _heard(finance)[-1] == "channel.test"
    assert len(channels_send_due(now=NOW).sent) == 5  # the test went at once
    assert len(receiver.to("/finance")) == 3 and len(receiver.to("/all")) == 3


def test_the_choice_is_checked_against_the_known_event_types_and_can_go_back_to_all(fleet):
    with pytest.raises(DomainError) as refused:
        channel_add(team=fleet.vision, kind="slack", name="x", url="https://hooks.example.com/a",
                    by=fleet.vision_lead, events=["budget.threshold", "budget.thresold"])
    assert refused.value.field == "events" and "budget.thresold" in refused.value.message
    with pytest.raises(DomainError):  # an admins' event is not a team's
        channel_add(team=fleet.vision, kind="slack", name="x", url="https://hooks.example.com/a",
                    by=fleet.vision_lead, events=["node.silent"])
    assert not TeamChannel.objects.exists()
    channel, _ = channel_add(team=fleet.vision, kind="slack", name="x",
                             url="https://hooks.example.com/a", by=fleet.vision_lead,
                             events=["loan.lent", "loan.lent", " "])
    assert channel.events == ["loan.lent"]
    channel_events_set(channel=channel, events=[], by=fleet.vision_lead)
    assert TeamChannel.objects.get().events == []  # all again
    with pytest.raises(NotFound):  # another team's lead
        channel_events_set(channel=channel, events=["loan.lent"], by=fleet.speech_lead)
    assert TeamChannel.objects.get().events == []


def test_every_event_the_team_hears_is_in_the_one_list():
    """The event types told to teams and admins (docs/budgets.md's tables) are the list's."""
    assert {"budget.threshold", "statement.sent", "reservation.pending", "loan.preempted",
            "reclaim.upheld", "gpu.drained"} <= set(TEAM_EVENTS)
    assert set(ADMIN_EVENTS) == {"reservation.pending", "reclaim.objected", "gpu.failed",
                                 "gpu.drained", "node.silent", "node.reporting",
                                 "statements.ready", "statements.to_approve"}


def test_a_lead_chooses_a_channels_events_on_the_team_page(fleet):
    channel, _ = channel_add(team=fleet.vision, kind="slack", name="ops",
                             url="https://hooks.example.com/a", by=fleet.vision_lead)
    url = f"/teams/vision/channels/{channel.pk}/events/"
    lead = Client()
    lead.force_login(fleet.vision_lead)
    page = lead.get("/teams/vision/").content.decode()
    assert f'id="channel-events-form-{channel.pk}"' in page
    assert 'value="statement.sent"' in page and "node.silent" not in page
    response = lead.post(url, {"events": FINANCE})
    assert response.status_code == 302
    assert TeamChannel.objects.get().events == ["budget.threshold", "statement.sent"]
    assert "budget.threshold, statement.sent" in lead.get("/teams/vision/").content.decode()
    lead.post(url, {"events": ["statement.sent", "nope"]})
    assert TeamChannel.objects.get().events == ["budget.threshold", "statement.sent"]
    assert "Unknown event type" in lead.get("/teams/vision/").content.decode()

    member = UserFactory(username="member")
    MembershipFactory(user=member, team=fleet.vision, role=Membership.Role.MEMBER)
    for user in (fleet.speech_lead, member):
        client = Client()
        client.force_login(user)
        assert client.post(url, {"events": []}).status_code in (403, 404)
    assert TeamChannel.objects.get().events == ["budget.threshold", "statement.sent"]
