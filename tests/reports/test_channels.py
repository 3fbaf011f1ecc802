"""Team channels through the notification outbox, against a real HTTP receiver on
loopback (docs/budgets.md, "Channels"): a budget crossing reaches Slack (Block Kit),
Teams (an Adaptive Card) and a generic webhook signed per Standard Webhooks once each,
retried with the same message id until delivered; URLs are checked against the network
guard when added and on the address connected to at every delivery, and stored sealed."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from accounts.models import Membership
from gpuquota.core.errors import DomainError
from gpuquota.outbox.models import Notification
from gpuquota.reservations.models import Assignment, Reservation
from reports.budgets import budget_set, budgets_check
from reports.channels import channel_add, channel_deliveries, channel_test, channels_send_due
from reports.models import TeamChannel
from tests.factories import EPOCH, GpuClassFactory, RateCardFactory, UserFactory, make_gpu
from tests.reports.receiver import Receiver, standard_webhooks_verify
from tests.usage.factories import team_with_user

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 10, 11, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def vision(settings):
    """Vision reserved an H100 for October (1860.00 at 2.50); alice leads it."""
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    h100 = GpuClassFactory(name="H100-80GB")
    RateCardFactory(gpu_class=h100, valid_from=EPOCH, reserved_rate=Decimal("2.50"))
    gpu = make_gpu(gpu_class=h100)
    team, alice = team_with_user("vision", "alice", gpu.node.cluster)
    Membership.objects.filter(user=alice, team=team).update(role="lead")
    start, end = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    reservation = Reservation.objects.create(
        team=team, gpu_class=h100, count=1, start=start, end=end, status="active",
        requested_by=alice, requested_at=start)
    Assignment.objects.create(reservation=reservation, gpu=gpu, assigned_from=start,
                              assigned_until=end)
    return team, alice


def test_a_budget_crossing_reaches_each_channel_once_retried_until_delivered(vision, receiver):
    team, alice = vision
    channel_add(team=team, kind="slack", name="slack", url=receiver.url + "/slack", by=alice)
    channel_add(team=team, kind="teams", name="teams", url=receiver.url + "/teams", by=alice)
    hook, secret = channel_add(team=team, kind="webhook", name="hook",
                               url=receiver.url + "/hook", by=alice)
    assert secret.startswith("whsec_")
    assert "127.0.0.1" not in hook.url_sealed and hook.url_host == "127.0.0.1"
    budget_set(team=team, amount="1800", by=alice, thresholds="50", now=NOW)
    # 600.00 to date is 33 %; the forecast 1860.00 is 103 %
    assert [a.basis for a in budgets_check(now=NOW)] == ["forecast"]
    budget_set(team=team, amount="1000", by=alice, thresholds="50", now=NOW)
    # 60 % now; the forecast's 100 % fired already this month
    assert [a.basis for a in budgets_check(now=NOW)] == ["actual"]
    assert Notification.objects.count() == 6  # 2 alerts x 3 channels

    receiver.fail["/hook"] = 1
    first = channels_send_due(now=NOW)
    assert len(first.sent) == 5 and len(first.failed) == 1
    assert channels_send_due(now=NOW + 29 * S).sent == []  # not due before the backoff
    second = channels_send_due(now=NOW + 31 * S)
    assert len(second.sent) == 1  # the hook failed once; the other was delivered
    assert channels_send_due(now=NOW + 3600 * S).sent == []
    hooks = receiver.to("/hook")
    assert len(hooks) == 3 and len(receiver.to("/slack")) == len(receiver.to("/teams")) == 2
    ids = [headers["webhook-id"] for headers, _ in hooks]
    assert len(set(ids)) == 2  # the retry carried the same id as its failed attempt
    for headers, body in hooks:
        assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                        now_s=int(headers["webhook-timestamp"]))
        assert not standard_webhooks_verify(secret=secret, headers=headers, body=body + b" ",
                                            now_s=int(headers["webhook-timestamp"]))
    event = receiver.json("/hook")[-1]
    assert event["type"] == "budget.threshold"
    assert {event["data"]["basis"], event["data"]["currency"]} <= {"actual", "forecast", "USD"}
    slack = receiver.json("/slack")[0]
    assert slack["blocks"][0]["type"] == "header" and len(slack["blocks"][0]["text"]["text"]) <= 150
    assert "Vision" in slack["text"]
    card = receiver.json("/teams")[0]["attachments"][0]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["type"] == "AdaptiveCard"
    history = list(channel_deliveries(team=team))
    assert len(history) == 6 and {row.status for row in history} == {"sent"}


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/x",
    "http://[::ffff:127.0.0.1]/", "http://2130706433/", "http://user:pw@example.com/",
    "ftp://example.com/", "not a url",
])
def test_a_channel_url_to_a_private_or_odd_address_is_refused(vision, settings, url):
    settings.CHANNEL_ALLOWED_NETWORKS = ""
    team, alice = vision
    with pytest.raises(DomainError) as caught:
        channel_add(team=team, kind="webhook", name="x", url=url, by=alice)
    assert caught.value.field == "url"
    assert not TeamChannel.objects.exists()


def test_the_guard_holds_at_delivery_and_the_test_button_sends_at_once(vision, receiver,
                                                                       settings):
    team, alice = vision
    channel, secret = channel_add(team=team, kind="webhook", name="hook",
                                  url=receiver.url + "/hook", by=alice)
    row = channel_test(channel=channel, by=alice, now=NOW)
    assert row.status == "sent" and row.attempts == 1
    headers, body = receiver.to("/hook")[0]
    assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                    now_s=int(NOW.timestamp()))
    assert receiver.json("/hook")[0]["type"] == "channel.test"
    settings.CHANNEL_ALLOWED_NETWORKS = ""  # the site no longer allows loopback
    row = channel_test(channel=channel, by=alice, now=NOW + S)
    assert row.status == "failed" and "loopback" in row.error
    assert len(receiver.requests) == 1  # the refused delivery never connected


def test_the_pages_show_the_secret_once_uncached_and_only_to_leads(vision, receiver):
    team, alice = vision
    member = UserFactory(username="mia")
    Membership.objects.create(user=member, team=team, role="member", valid_from=EPOCH)
    as_member, as_outsider, as_lead = Client(), Client(), Client()
    as_member.force_login(member)
    as_outsider.force_login(UserFactory(username="olga"))
    as_lead.force_login(alice)
    form = {"kind": "webhook", "name": "ops", "url": receiver.url + "/hook"}
    assert as_outsider.post("/teams/vision/channels/", form).status_code == 404
    assert as_member.post("/teams/vision/channels/", form).status_code == 403
    assert as_member.post("/teams/vision/budget/", {"amount": "5"}).status_code == 403
    shown = as_lead.post("/teams/vision/channels/", form)
    secret = TeamChannel.objects.get().secret_sealed
    assert shown.status_code == 200 and 'id="channel-secret"' in shown.content.decode()
    assert secret not in shown.content.decode()  # the sealed form never; the plain once
    assert "whsec_" in shown.content.decode()
    assert {"no-store", "no-cache", "private"} <= {
        d.strip() for d in shown["Cache-Control"].split(",")}
    page = as_lead.get("/teams/vision/").content.decode()
    assert "whsec_" not in page and receiver.url not in page and "127.0.0.1" in page
