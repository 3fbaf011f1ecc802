"""What job reports tell a team's channels (docs/jobs.md, "On the team's channels"): each
zero-use step once (its mail key), naming the job, its user, GPUs, idle time and what comes
next, whatever the scans' retries; the weekly digest once per team per week, without its
users ranked; the mail about one wasteful job stays mail."""

import json
from datetime import timedelta

import pytest

from gpuquota.jobs.alerts import jobs_zero_use_scan
from gpuquota.jobs.services import jobs_collect
from gpuquota.outbox.models import Notification
from gpuquota.schedulers.models import BackendConfig, SlurmJob
from reports.channels import channel_add
from tests.jobs.shapes import T0
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
MINUTE = timedelta(minutes=1)


def channel(world_team, by, settings, name="hook"):
    settings.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    channel_add(team=world_team, kind="webhook", name=name, url="http://127.0.0.1:9/hook",
                by=by)


def told(event=None) -> list[dict]:
    rows = Notification.objects.order_by("id")
    if event:
        rows = rows.filter(event=event)
    return [json.loads(r.body) for r in rows]


def test_each_zero_use_step_reaches_the_teams_channels_once(settings):
    world = JobWorld.build()
    channel(world.team, world.lead, settings)
    channel(world.other_team, world.other_lead, settings, name="other")
    world.slurm_job("502", utils=[[90] * 20 + [0] * 160, [0] * 180])
    SlurmJob.objects.filter(job_id="502").update(ended_at=None, state="RUNNING")
    BackendConfig.objects.create(cluster=world.cluster, mode="export")  # refuses to stop
    settings.JOBS_ZERO_USE_CANCEL = "@vision"
    jobs_collect(now=T0 + 180 * MINUTE, since=T0 - timedelta(hours=1))

    jobs_zero_use_scan(now=T0 + 82 * MINUTE)
    jobs_zero_use_scan(now=T0 + 84 * MINUTE)  # nothing new: once per step
    [warned] = told()
    assert warned["type"] == "job.zero_use_warned"
    data = warned["data"]
    assert (data["job_id"], data["user"], data["gpus"], data["idle_s"]) == (
        "502", "member", ["h100-node-00/0", "h100-node-00/1"], 62 * 60)
    assert "cancelled at 2026-" in data["next"] and "last warning" in data["next"]
    assert "502" in data["text"] and "member" in data["text"] and "62 min" in data["text"]

    late = T0 + 125 * MINUTE  # 105 min at zero: the last warning
    jobs_zero_use_scan(now=late)
    jobs_zero_use_scan(now=late + 2 * MINUTE)
    [last] = told("job.zero_use_last_warning")
    assert last["data"]["stop_at"] == (late + 15 * MINUTE).isoformat()
    assert "cancelled at" in last["data"]["title"]

    jobs_zero_use_scan(now=late + 15 * MINUTE)  # the backend does not write: refused
    jobs_zero_use_scan(now=late + 30 * MINUTE)  # retried, refused again: told once
    [refused] = told("job.zero_use_stopped")
    assert refused["data"]["refused"] and refused["data"]["how"] == "refused"
    assert "does not write" in refused["data"]["detail"]
    assert "15 min later, then twice as long" in refused["data"]["next"]
    assert [r.target for r in Notification.objects.all()] == [
        Notification.objects.first().target] * 3  # the other team heard nothing


def test_a_job_told_to_the_channel_though_its_owner_opted_out_of_mail(settings):
    from gpuquota.jobs.models import JobMailOptOut
    from gpuquota.mail.models import MailDelivery

    world = JobWorld.build()
    channel(world.team, world.lead, settings)
    JobMailOptOut.objects.create(user=world.member, created_at=T0)
    world.slurm_job("503", utils=[[0] * 130])
    SlurmJob.objects.filter(job_id="503").update(ended_at=None, state="RUNNING")
    jobs_collect(now=T0 + 130 * MINUTE, since=T0 - timedelta(hours=1))
    jobs_zero_use_scan(now=T0 + 125 * MINUTE)  # staging: 2 h allowed, then warned
    [warned] = told()
    assert "not opted in" in warned["data"]["next"]
    assert not MailDelivery.objects.filter(template="jobs_zero_use").exists()


def test_the_weekly_digest_reaches_each_teams_channels_once_a_week(settings):
    from gpuquota.jobs.digest import jobs_digest_send
    from gpuquota.jobs.services import jobs_refresh

    world = JobWorld.build()
    channel(world.team, world.lead, settings)
    world.slurm_job("601", utils=[[90] * 60, [0] * 60, [0] * 60, [0] * 60])
    assert jobs_refresh(now=T0 + timedelta(hours=3))["reported"] == 1
    monday_after = T0 + timedelta(days=7, hours=1)  # T0 is a Monday
    jobs_digest_send(now=monday_after)
    jobs_digest_send(now=monday_after + timedelta(hours=1))
    [digest] = told("job.team_digest")
    assert digest["data"]["jobs"] == 1 and digest["data"]["held_gpu_s"] == 4 * 3600
    assert digest["data"]["pitfalls"] == {"gpus_unused": 3 * 3600}
    assert "member" not in json.dumps(digest)  # no user ranked on a channel
    assert {b["type"] for b in told()} == {"job.team_digest"}  # the job's own mail: mail only
