"""A user's own channels (docs/budgets.md, "A user's own channels"): added on the profile
page, they hear the user's own events through the core hook `USER_EVENT` (their job's
zero-use warning and last warning), once per channel, signed and delivered to a real
receiver on loopback; a channel hears the events it chose; nobody else sees or changes it;
the network guard holds."""

from datetime import timedelta

import pytest
from django.test import Client

from gpuquota.core.errors import DomainError, NotFound
from gpuquota.outbox.models import Notification
from reports.channels import channels_send_due
from reports.models import UserChannel
from reports.user_channels import (
    user_channel_add,
    user_channel_events_set,
    user_channel_remove,
    user_channel_test,
)
from tests.jobs.shapes import T0
from tests.reports.receiver import Receiver, standard_webhooks_verify

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def receiver(settings):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    server = Receiver()
    yield server
    server.close()


def _heard(channel) -> list[str]:
    return list(Notification.objects.filter(target=channel.target).order_by("id")
                .values_list("event", flat=True))


def test_a_jobs_zero_use_warnings_reach_its_owners_own_channels_once(receiver, settings):
    from gpuquota.jobs.alerts import jobs_zero_use_scan
    from gpuquota.jobs.services import jobs_collect
    from gpuquota.schedulers.models import BackendConfig, SlurmJob
    from tests.jobs.world import JobWorld

    world = JobWorld.build()
    hook, secret = user_channel_add(user=world.member, kind="webhook", name="mine",
                                    url=receiver.url + "/mine")
    last_only, _ = user_channel_add(user=world.member, kind="slack", name="urgent",
                                    url=receiver.url + "/urgent",
                                    events=["job.zero_use_last_warning"])
    others, _ = user_channel_add(user=world.lead, kind="slack", name="lead",
                                 url=receiver.url + "/lead")
    world.slurm_job("502", utils=[[90] * 20 + [0] * 160])
    SlurmJob.objects.filter(job_id="502").update(ended_at=None, state="RUNNING")
    BackendConfig.objects.create(cluster=world.cluster, mode="export")
    jobs_collect(now=T0 + timedelta(minutes=180), since=T0 - timedelta(hours=1))
    assert jobs_zero_use_scan(now=T0 + timedelta(minutes=82)) == 1
    assert jobs_zero_use_scan(now=T0 + timedelta(minutes=84)) == 0  # once per stretch
    settings.JOBS_ZERO_USE_CANCEL = "@vision"
    late = T0 + timedelta(minutes=145)
    jobs_zero_use_scan(now=late)  # the last warning
    jobs_zero_use_scan(now=late + timedelta(minutes=1))
    assert _heard(hook) == ["job.zero_use_warned", "job.zero_use_last_warning"]
    assert _heard(last_only) == ["job.zero_use_last_warning"]
    assert _heard(others) == []  # the lead's own channel: not the member's job

    assert len(channels_send_due().sent) == 3  # queued at the suite's now
    bodies = receiver.json("/mine")
    assert bodies[0]["data"]["job_id"] == "502" and "/jobs/" in bodies[0]["data"]["link"]
    assert bodies[1]["data"]["stop_at"] == (late + timedelta(minutes=15)).isoformat()
    for headers, body in receiver.to("/mine"):
        assert standard_webhooks_verify(secret=secret, headers=headers, body=body,
                                        now_s=int(headers["webhook-timestamp"]))
    assert "last warning" in receiver.json("/urgent")[0]["text"]


def test_a_users_channels_are_their_own_and_guarded(receiver, roles, clock):
    with pytest.raises(DomainError) as refused:
        user_channel_add(user=roles.member, kind="slack", name="x", url="http://10.0.0.5/hook")
    assert refused.value.field == "url"
    with pytest.raises(DomainError) as refused:
        user_channel_add(user=roles.member, kind="slack", name="x", url=receiver.url + "/x",
                         events=["budget.threshold"])  # a team's event, not a user's
    assert refused.value.field == "events"
    channel, _ = user_channel_add(user=roles.member, kind="slack", name="x",
                                  url=receiver.url + "/x")
    for action in (lambda: user_channel_events_set(channel=channel, events=[], by=roles.lead),
                   lambda: user_channel_test(channel=channel, by=roles.admin),
                   lambda: user_channel_remove(channel=channel, by=roles.admin)):
        with pytest.raises(NotFound):
            action()
    assert user_channel_test(channel=channel, by=roles.member, now=clock.now).status == "sent"

    url = f"/accounts/profile/channels/{channel.pk}/events/"
    for name, user in roles.users().items():
        client = Client()
        if name != "anonymous":
            client.force_login(user)
        answer = client.post(url, {"events": ["job.wasteful"]})
        profile = client.get("/accounts/profile/")
        if name == "member":
            assert answer.status_code == 302
            assert 'id="user-channels"' in profile.content.decode()
            assert "job.wasteful" in profile.content.decode()
        elif name == "anonymous":
            assert answer.status_code == 302 and "/login" in answer.url
        else:  # another user: no such channel, and not on their profile
            assert answer.status_code == 404, name
            assert 'id="user-channels"' not in profile.content.decode()
    assert UserChannel.objects.get().events == ["job.wasteful"]
