"""Zero-use jobs stopped through the dev Slurm cluster where the site opted in (docs/jobs.md,
Stopping): a real job holds a GPU, its samples say the GPU is idle, and the zero-use scan
warns its owner, warns a last time, and stops it no sooner than that after; slurmctld then
shows it cancelled, or requeued (pending again, one restart), or, in site shape (c)
(JobRequeue=0), cancelled with the reason said. Audited, each mail once. The cluster is
given back bare in shape (a)."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.core.models import AuditEntry
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.jobs.alerts import jobs_zero_use_scan
from gpuquota.jobs.models import Job
from gpuquota.jobs.services import jobs_collect
from gpuquota.mail.models import MailDelivery
from gpuquota.outbox.models import Notification
from gpuquota.schedulers.models import SlurmJob
from gpuquota.schedulers.slurm.jobs import slurm_jobs_import
from gpuquota.schedulers.slurm.running import running_gpus_import
from reports.channels import channel_add
from tests.factories import AdminFactory
from tests.jobs.world import samples_write
from tests.schedulers.slurm_shapes import shape_bare
from tests.schedulers.test_slurm_live import _site

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]
MINUTE = timedelta(minutes=1)


@pytest.fixture(scope="module", autouse=True)
def _given_back_bare(dev_slurm, django_db_blocker):
    with django_db_blocker.unblock():  # the samples' days (the jobs run now)
        today = datetime.now(UTC).date()
        partitions_ensure(days=[today + timedelta(days=d) for d in (-1, 0, 1)])
    yield
    dev_slurm.cluster.reshape("a")
    shape_bare(dev_slurm)


@pytest.fixture
def policy(settings):
    """Warned after 10 minutes at zero (no work yet: the staging threshold), stopped 10
    minutes later, the last warning 5 minutes before."""
    settings.JOBS_ZERO_USE_STAGING_S = 600
    settings.JOBS_ZERO_USE_CANCEL_AFTER_S = 600
    settings.JOBS_ZERO_USE_LAST_WARNING_S = 300
    settings.JOBS_ZERO_USE_CANCEL = "dev"
    return settings


def _running_job(live, site) -> Job:
    """A real one-GPU job of speech's member (speech has a quota of 2), seen by gpuquota as
    its users' jobs are: slurmctld's GPUs, the accounting import, the jobs' collection."""
    slurm_id = live.sbatch(user="nobody", account="speech", seconds=900)
    assert live.wait_state(slurm_id, {"RUNNING"})["JobState"] == "RUNNING"
    running_gpus_import(cluster=site.cluster)
    for _ in range(40):  # slurmdbd learns of the job a moment later
        slurm_jobs_import(cluster=site.cluster)
        if SlurmJob.objects.filter(job_id=slurm_id, started_at__isnull=False).exists():
            break
        live.wait_state(slurm_id, {"never"}, timeout_s=0.5)
    start = SlurmJob.objects.get(job_id=slurm_id).started_at
    jobs_collect(now=start + 30 * MINUTE, since=start - timedelta(hours=1))
    job = Job.objects.get(job_id=slurm_id)
    assert job.gpus_held == 1 and job.owner.username == "bob"
    samples_write(job.job_gpus.get().gpu, [0] * 25, start=start)  # memory held, no kernel
    return job


@pytest.mark.parametrize(("shape", "requeue", "slurm_shows", "note"), [
    ("a", False, "CANCELLED", ""),
    ("a", True, "PENDING", ""),
    ("c", True, "CANCELLED", "the job cannot be requeued (JobRequeue=0 or --no-requeue): "
                             "cancelled instead"),
])
def test_a_zero_use_job_is_warned_twice_then_stopped_as_slurm_shows(
        live, policy, shape, requeue, slurm_shows, note):
    live.cluster.reshape(shape)
    site = _site(live)
    if requeue:
        policy.JOBS_ZERO_USE_REQUEUE = "@speech"  # the team's policy
    job = _running_job(live, site)
    policy.CHANNEL_ALLOWED_NETWORKS = "127.0.0.1/32"
    channel_add(team=job.team, kind="webhook", name="ops", url="http://127.0.0.1:9/hook",
                by=AdminFactory(username="root"))
    start = job.started_at
    assert jobs_zero_use_scan(now=start + 9 * MINUTE) == 0  # 9 min at zero: staging
    assert jobs_zero_use_scan(now=start + 11 * MINUTE) == 1  # first warning
    first = MailDelivery.objects.get(template="jobs_zero_use")
    assert '"cancel_at"' in first.context_json and ("requeued" if requeue and shape == "a"
                                                     else "cancelled") in first.context_json
    jobs_zero_use_scan(now=start + 14 * MINUTE)  # 14 min: not yet 5 before the stop
    assert not MailDelivery.objects.filter(template="jobs_zero_use_last").exists()
    jobs_zero_use_scan(now=start + 16 * MINUTE)  # the last warning
    last = MailDelivery.objects.get(template="jobs_zero_use_last")
    assert last.recipient.username == "bob" and last.key != first.key
    jobs_zero_use_scan(now=start + 20 * MINUTE)  # due, but 4 min after the last warning
    assert live.job(job.job_id)["JobState"] == "RUNNING"

    jobs_zero_use_scan(now=start + 21 * MINUTE)
    seen = live.wait_state(job.job_id, {slurm_shows})  # slurmctld is the record
    assert seen["JobState"] == slurm_shows, seen
    assert seen["Restarts"] == ("1" if slurm_shows == "PENDING" else "0")
    how = "requeued" if slurm_shows == "PENDING" else "cancelled"
    job.refresh_from_db()
    assert (job.zero_use_stopped_how, job.state) == (how, how.upper())
    done = AuditEntry.objects.get(action="jobs.zero_use_cancelled", object_id=str(job.pk))
    assert done.changes["how"] == how and done.changes["requeue_asked"] == requeue
    assert done.changes["idle_s"] == 21 * 60 and done.changes["last_warned_at"]
    assert done.reason == note
    assert [a.action for a in AuditEntry.objects.filter(
        object_id=str(job.pk), action__startswith="jobs.").order_by("pk")] == [
        "jobs.zero_use_warned", "jobs.zero_use_last_warned", "jobs.zero_use_cancelled"]
    jobs_zero_use_scan(now=start + 23 * MINUTE)  # once: no second stop, no mail again
    assert sorted(MailDelivery.objects.values_list("template", flat=True)) == [
        "jobs_zero_use", "jobs_zero_use_cancelled", "jobs_zero_use_last"]
    stopped = MailDelivery.objects.get(template="jobs_zero_use_cancelled")
    assert f'"how": "{how}"' in stopped.context_json
    # The team's channel heard each step once, the stop as Slurm showed it.
    told = [json.loads(n.body)["data"] for n in Notification.objects.order_by("id")]
    assert [(d["job_id"], d["user"]) for d in told] == [(job.job_id, "bob")] * 3
    assert told[2]["how"] == how and told[2]["refused"] is False
    assert ("restarts from its last checkpoint" in told[2]["next"]) is (how == "requeued")
    assert not note or note in told[2]["next"]  # why it was cancelled, not requeued
