"""The platform admins' channels (docs/budgets.md, "Channels for the admins"): the apps tell
of admin events through the core hook `ADMIN_EVENT` (a request waiting for approval, a
lead's objection, a GPU failed, a node drained, a node silent and back, statements ready
and to approve), each once per channel whatever the retries and beat runs, delivered to a
real receiver on loopback, signed; each channel hears the events it chose; the page is
for admins only (the role matrix), with the network guard and sealing of team channels."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.timeutil import Period
from gpuquota.ingest.health import gpu_health_evaluate
from gpuquota.ingest.models import EventType, GpuEvent
from gpuquota.inventory.models import Node
from gpuquota.outbox.models import Notification
from gpuquota.reliability.drains import drains_apply
from gpuquota.usage.models import NodeSilence
from gpuquota.usage.silence import node_silences_scan
from reclaim.lifecycle import recommendation_object
from reports.admin_channels import (
    admin_channel_add,
    admin_channel_deliveries,
    admin_channel_events_set,
    admin_channel_test,
)
from reports.channels import channels_send_due
from reports.models import AdminChannel, Statement
from reports.notices import statements_ready_notify, statements_unapproved_remind
from tests.factories import AdminFactory, NodeFactory, make_gpu
from tests.reclaim.factories import World, make_rec
from tests.reports.receiver import Receiver, standard_webhooks_verify
from tests.reservations.factories import NOW, Fleet

pytestmark = pytest.mark.django_db
H, MIN = timedelta(hours=1), timedelta(minutes=1)


@pytest.fixture
def receiver(settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    settings.AGENT_SILENT_AFTER_S = 300
    server = Receiver()
    yield server
    server.close()


def _heard(channel) -> list[str]:
    return list(Notification.objects.filter(target=channel.target).order_by("id")
                .values_list("event", flat=True))


def test_a_pending_request_and_an_objection_reach_the_admins_channel_once(receiver, clock):
    clock.move_to(NOW)
    fleet = Fleet.create(vision_quota=1)
    hook, secret = admin_channel_add(kind="webhook", name="ops", url=receiver.url + "/ops",
                                     by=fleet.admin)
    assert secret.startswith("whsec_") and "127.0.0.1" not in hook.url_sealed  # sealed
    fleet.request(count=1)  # within quota: approved at once, nothing for the admins
    pending = fleet.request(count=2)
    assert pending.status == "pending"
    assert _heard(hook) == ["reservation.pending"]

    fleet.request(count=2)  # a second request: told of its own
    assert _heard(hook) == ["reservation.pending", "reservation.pending"]
    assert len(channels_send_due(now=NOW).sent) == 2
    assert len(channels_send_due(now=NOW).sent) == 0  # delivered: nothing more
    bodies = receiver.json("/ops")
    assert bodies[0]["type"] == "reservation.pending"
    assert bodies[0]["data"]["reservation"] == pending.pk
    assert bodies[0]["data"]["link"].endswith(reverse("reservation_pending"))
    for headers, body in receiver.to("/ops"):
        assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                        now_s=int(headers["webhook-timestamp"]))


def test_a_leads_objection_to_a_reclaim_reaches_the_admins_channel(receiver, clock):
    clock.move_to(NOW)
    world = World.create()
    channel, _ = admin_channel_add(kind="slack", name="ops", url=receiver.url + "/ops",
                                   by=world.admin)
    rec = make_rec(world, status="accepted", accepted_at=NOW, grace_until=NOW + H)
    recommendation_object(recommendation=rec, actor=world.lead, reason="we train on Monday",
                          now=NOW)
    assert _heard(channel) == ["reclaim.objected"]
    assert len(channels_send_due(now=NOW).sent) == 1
    (body,) = receiver.json("/ops")
    assert "we train on Monday" in str(body["blocks"])


def test_a_failed_gpu_and_its_drain_reach_the_admins_reserved_or_not(receiver, clock):
    at = datetime(2026, 6, 1, 12, tzinfo=UTC)
    clock.move_to(at)
    node = NodeFactory(hostname="gpu-21")
    gpu = make_gpu(node=node, at=at - timedelta(days=30))
    admin = AdminFactory(username="root")
    everything, _ = admin_channel_add(kind="slack", name="all", url=receiver.url + "/all",
                                      by=admin)
    hardware, _ = admin_channel_add(kind="teams", name="hardware", by=admin,
                                    url=receiver.url + "/hw", events=["gpu.failed"])
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=node, gpu=gpu, ts=at - 2 * MIN,
                            type=EventType.XID, xid=79, received_at=at - 2 * MIN)
    gpu_health_evaluate(gpu_id=gpu.pk, hour=at - H)
    gpu_health_evaluate(gpu_id=gpu.pk, hour=at - H)  # evaluated again: nothing new
    (drain,) = drains_apply(since=at - 5 * MIN, now=at)
    assert drains_apply(since=at - 5 * MIN, now=at) == []
    assert _heard(everything) == ["gpu.failed", "gpu.drained"]
    assert _heard(hardware) == ["gpu.failed"]
    channels_send_due(now=at)
    slack = receiver.json("/all")
    assert slack[0]["blocks"][0]["text"]["text"] == "GPU gpu-21/0 failed"
    assert "recorded" in slack[1]["text"] and "xid 79" in slack[1]["text"]
    assert receiver.json("/hw")[0]["type"] == "message"  # a Teams card


def test_a_silent_node_is_told_once_and_once_more_when_it_reports(receiver, clock):
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    clock.move_to(now)
    admin = AdminFactory(username="root")
    channel, _ = admin_channel_add(kind="slack", name="ops", url=receiver.url + "/ops", by=admin)
    node = NodeFactory(hostname="gpu-31")
    Node.objects.filter(pk__in=[node.pk]).update(last_seen_at=now - MIN,
                                                 created_at=now - timedelta(days=9))
    assert node_silences_scan(now=now).silent == []
    done = node_silences_scan(now=now + 5 * MIN)  # 6 minutes without a report
    assert done.silent == [node.pk]
    assert node_silences_scan(now=now + 6 * MIN).silent == []  # the next beat: told already
    assert _heard(channel) == ["node.silent"]
    Node.objects.filter(pk=node.pk).update(last_seen_at=now + 30 * MIN)
    assert node_silences_scan(now=now + 31 * MIN).reporting == [node.pk]
    assert node_silences_scan(now=now + 32 * MIN).reporting == []
    assert _heard(channel) == ["node.silent", "node.reporting"]
    silence = NodeSilence.objects.get()
    assert (silence.last_seen_at, silence.ended_at) == (now - MIN, now + 30 * MIN)
    assert node_silences_scan(now=now + 36 * MIN).silent == [node.pk]  # silent again
    assert _heard(channel)[-1] == "node.silent" and NodeSilence.objects.count() == 2
    channels_send_due(now=now + 36 * MIN)
    texts = [b["text"] for b in receiver.json("/ops")]
    assert "gpu-31" in texts[0] and "reported at 2026-06-01 12:30 UTC" in texts[1]


def test_statements_ready_and_to_approve_reach_the_admins_once_a_month(receiver, clock):
    now = datetime(2026, 11, 1, 1, tzinfo=UTC)
    clock.move_to(now)
    fleet = Fleet.create(sizes=(1,))
    channel, _ = admin_channel_add(kind="slack", name="billing", url=receiver.url + "/b",
                                   by=fleet.admin, events=["statements.ready",
                                                           "statements.to_approve"])
    october = Period.month(2026, 10)
    Statement.objects.create(team=fleet.vision, month=october.start.date(), team_name="Vision",
                             team_slug="vision", computed_at=now, computed_until=october.end)
    statements_ready_notify(period=october)
    statements_ready_notify(period=october)  # a retry of the month's start
    assert _heard(channel) == ["statements.ready"]
    statements_unapproved_remind(period=october, now=now + timedelta(days=20))
    statements_unapproved_remind(period=october, now=now + timedelta(days=21))
    assert _heard(channel) == ["statements.ready", "statements.to_approve"]
    channels_send_due(now=now)
    assert "1 draft(s)" in receiver.json("/b")[0]["text"]


def test_admin_channels_are_checked_chosen_tested_and_admins_only(receiver, clock, roles):
    clock.move_to(NOW)
    with pytest.raises(NotFound):
        admin_channel_add(kind="slack", name="x", url=receiver.url + "/x", by=roles.lead)
    with pytest.raises(DomainError) as refused:
        admin_channel_add(kind="slack", name="x", url="http://169.254.169.254/latest",
                          by=roles.admin)
    assert refused.value.field == "url"
    with pytest.raises(DomainError) as refused:
        admin_channel_add(kind="slack", name="x", url=receiver.url + "/x", by=roles.admin,
                          events=["budget.threshold"])  # a team's event, not the admins'
    assert refused.value.field == "events"
    channel, _ = admin_channel_add(kind="slack", name="x", url=receiver.url + "/x",
                                   by=roles.admin, events=["node.silent"])
    admin_channel_events_set(channel=channel, events=["gpu.failed", "node.silent"],
                             by=roles.admin)
    assert AdminChannel.objects.get().events == ["gpu.failed", "node.silent"]
    row = admin_channel_test(channel=channel, by=roles.admin, now=NOW)
    assert row.status == "sent" and receiver.json("/x")[0]["blocks"]
    assert list(admin_channel_deliveries()) == [row]

    url = "/manage/channels/"
    for name, user in roles.users().items():
        client = Client()
        if name != "anonymous":
            client.force_login(user)
        page = client.get(url)
        posted = client.post(url, {"kind": "slack", "name": f"by-{name}",
                                   "url": receiver.url + "/y"})
        events = client.post(f"{url}{channel.pk}/events/", {"events": []})
        if name == "admin":
            assert page.status_code == 200 and 'id="admin-channels"' in page.content.decode()
            assert posted.status_code == 200  # the added page
            assert events.status_code == 302
        elif name == "anonymous":
            assert {page.status_code, posted.status_code, events.status_code} == {302}
        else:
            assert {page.status_code, posted.status_code, events.status_code} == {404}, name
    assert list(AdminChannel.objects.values_list("name", flat=True)) == ["by-admin", "x"]
    assert AdminChannel.objects.get(name="x").events == []  # the admin chose all again
