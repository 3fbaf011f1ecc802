"""Jobs collected from Slurm's accounting and the GPUs slurmctld named, their stored reports
(figures, notes, exact cost), and the mail about a wasteful job: once, rate-limited, never
to a user who opted out."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command

from gpuquota.jobs.models import Job
from gpuquota.jobs.services import job_mail_opt_out_set, jobs_refresh
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.outbox import mail_send_queued
from tests.jobs.shapes import T0
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
NOW = T0 + timedelta(hours=3)


@pytest.fixture
def world():
    return JobWorld.build()


def _mails(user):
    return MailDelivery.objects.filter(recipient=user, template="jobs_wasteful")


def test_a_job_holding_four_gpus_and_using_one(world, smtp_server):
    world.slurm_job("101", utils=[[90] * 120] + [[0] * 120] * 3)
    world.slurm_job("102", utils=[[90] * 60], start=T0 + timedelta(minutes=5))
    assert jobs_refresh(now=NOW) == {"collected": 2, "reported": 2}
    job = Job.objects.get(job_id="101")
    assert (job.owner, job.team, job.gpus_held) == (world.member, world.team, 4)
    assert job.held_gpu_s == 4 * 7200 and job.wasted_gpu_s == 3 * 7200
    assert job.cost == Decimal("24.00") and job.wasted_cost == Decimal("18.00")
    note = job.notes.get()
    assert (note.code, note.wasted_gpu_s, note.wasted_cost) == (
        "gpus_unused", 3 * 7200, Decimal("18.00"))
    assert note.title == "This job did not use 3 of the 4 GPUs it held."
    healthy = Job.objects.get(job_id="102")
    assert healthy.wasted_gpu_s == 0 and not healthy.notes.exists()
    mail = _mails(world.member).get()
    assert mail.key == f"jobs.wasteful.{job.pk}"
    assert "did not use 3 of the 4 GPUs" in mail.context_json
    assert [u.pk for u in mail_send_queued(key=mail.key).sent] == [world.member.pk]
    [sent] = smtp_server.messages
    assert sent.message["Subject"] == "[gpuquota] Your job 101 on Della left 6.0 GPU-hours unused"
    assert "18.00 USD at the on-demand rate" in sent.text() and "fewer GPUs" in sent.html()
    assert f"/jobs/{job.pk}/" in sent.text() and "/jobs/mail/" in sent.text()
    # A second run changes nothing: reports are final, the mail is not sent twice.
    assert jobs_refresh(now=NOW + timedelta(minutes=5)) == {"collected": 0, "reported": 0}
    assert _mails(world.member).count() == 1


def test_a_job_far_under_its_slurm_time_limit_gets_the_advice(world):
    """The time limit comes from Slurm's accounting (SlurmJob.time_limit_s, issue 34)."""
    from gpuquota.schedulers.models import SlurmJob

    world.slurm_job("103", utils=[[90] * 60])
    SlurmJob.objects.filter(job_id="103").update(time_limit_s=24 * 3600)
    jobs_refresh(now=NOW)
    job = Job.objects.get(job_id="103")
    assert job.time_limit_s == 24 * 3600
    assert [n.code for n in job.notes.all()] == ["time_limit_far"]


def test_the_cost_is_rounded_once(world):
    from gpuquota.rates.models import RateCard

    RateCard.objects.update(on_demand_rate=Decimal("3.0001"))
    world.slurm_job("103", utils=[[90] * 7] * 3)  # 3 × 420 s × 3.0001 / 3600 = 1.0500350
    jobs_refresh(now=NOW)
    assert Job.objects.get(job_id="103").cost == Decimal("1.05")


def test_mail_is_rate_limited_and_opt_out_is_honoured(world):
    world.slurm_job("201", utils=[[90] * 60, [0] * 60])
    world.slurm_job("202", utils=[[90] * 60, [0] * 60], start=T0 + timedelta(minutes=70))
    jobs_refresh(now=NOW)
    assert _mails(world.member).count() == 1  # one a day, not one a job
    job_mail_opt_out_set(user=world.member, opted_out=True, now=NOW)
    world.slurm_job("203", utils=[[90] * 60, [0] * 60], start=T0 + timedelta(days=1, hours=2))
    jobs_refresh(now=NOW + timedelta(days=1, hours=2))
    assert Job.objects.get(job_id="203").reported_at is not None
    assert _mails(world.member).count() == 1
    job_mail_opt_out_set(user=world.member, opted_out=False, now=NOW)
    world.slurm_job("204", utils=[[90] * 60, [0] * 60], start=T0 + timedelta(days=1, hours=4))
    jobs_refresh(now=NOW + timedelta(days=1, hours=4))
    assert _mails(world.member).count() == 2


def test_jobstats_command_prints_the_report(world):
    world.slurm_job("301", utils=[[90] * 60, [0] * 60])
    jobs_refresh(now=NOW)
    out = StringIO()
    call_command("jobstats", "della", "301", stdout=out)
    text = out.getvalue()
    assert "Job ID:      301 (Slurm)" in text
    assert "This job did not use 1 of the 2 GPUs it held." in text
    assert "Cost:        6.00 USD at the on-demand rate" in text
    assert "Wasted in all: 1.00 GPU-hours, 3.00 USD" in text
    out = StringIO()
    call_command("job_report", "301", stdout=out)
    assert out.getvalue() == text


def _pod_records(gpu, start, minutes, *, pod="train-7f9c", namespace="vision-ns", util=90):
    from django.utils import timezone

    from gpuquota.ingest.models import ProcessRecord, Sample

    now = timezone.now()
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        Sample.objects.create(gpu=gpu, window_start=at, window_end=at + timedelta(minutes=1),
                              readings=6, util_gpu_avg=util, util_gpu_max=util,
                              memory_used_bytes_max=8 * 1024 ** 3, received_at=now)
        ProcessRecord.objects.create(gpu=gpu, window_start=at, window_end=at + timedelta(minutes=1),
                                     pid=7, pid_start=1, user="root", command="python",
                                     job_source="kubernetes", job_id=pod, job_account=namespace,
                                     received_at=now)


def test_a_pod_is_a_job_from_the_agents_records(world):
    from accounts.models import ClusterIdentity
    from tests.factories import EPOCH, ClusterIdentityFactory

    ClusterIdentityFactory(cluster=world.cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE,
                           key="vision-ns", user=None, team=world.team, valid_from=EPOCH)
    _pod_records(world.gpus[0], T0, 60, util=5)
    # Still running: its last record is recent, so it is collected but not reported.
    assert jobs_refresh(now=T0 + timedelta(minutes=62)) == {"collected": 1, "reported": 0}
    pod = Job.objects.get(source="kubernetes")
    assert (pod.job_id, pod.team, pod.ended_at, pod.gpus_held) == ("train-7f9c", world.team,
                                                                   None, 1)
    # Seen again later, it is the same job, now ended and reported once settled.
    jobs_refresh(now=T0 + timedelta(minutes=90))
    pod = Job.objects.get(source="kubernetes")
    assert pod.ended_at == T0 + timedelta(minutes=60) and pod.reported_at is not None
    assert [n.code for n in pod.notes.all()] == ["mig_sized"]


def test_the_weekly_digest_goes_once_to_the_wasteful_user_and_the_leads(world, settings,
                                                                        smtp_server):
    from gpuquota.jobs.digest import jobs_digest_send

    settings.JOBS_DIGEST_MIN_GPU_S = 3600
    world.slurm_job("601", utils=[[90] * 120] + [[0] * 120] * 3)  # T0 is a Monday
    jobs_refresh(now=NOW)
    monday_after = T0 + timedelta(days=7, hours=1)
    assert jobs_digest_send(now=monday_after) == {"users": 1, "leads": 1}
    assert jobs_digest_send(now=monday_after + timedelta(hours=1)) == {"users": 0, "leads": 0}
    mail_send_queued()  # the job's own mail and the two digests
    [mine] = [m for m in smtp_server.to(world.member.email) if "last week" in m.message["Subject"]]
    [lead] = smtp_server.to(world.lead.email)
    assert "8.0 GPU-hours, 25 % efficiency" in mine.message["Subject"]
    assert "job 601 on Della (4 GPUs): 6.0 GPU-hours wasted (gpus_unused)" in mine.text()
    assert "- member: 1 job, 8.0 GPU-hours held, 6.0 wasted (efficiency 25 %)" in lead.text()
    settings.JOBS_DIGEST_MAX_EFFICIENCY_PCT = 20  # 25 % is efficient enough for this site
    assert jobs_digest_send(now=monday_after + timedelta(days=7)) == {"users": 0, "leads": 0}
