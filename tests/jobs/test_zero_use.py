"""The zero-use clock (no database) and the warning of a running job (database): what
counts as zero, what a burst does, staging before the first kernel, warned once per stretch,
with its evidence audited."""

from datetime import timedelta

import pytest

from gpuquota.jobs.zero_use import zero_use
from tests.jobs.shapes import T0, series


def clock(per_gpu, minutes, **kw):
    return zero_use(series=[series(f"n1/{i}", u, **kw) for i, u in enumerate(per_gpu)],
                    start=T0, now=T0 + timedelta(minutes=minutes))


def test_the_clock_starts_when_the_last_lasting_work_ends():
    c = clock([[90] * 20 + [0] * 61], 81)
    assert c.worked and c.since == T0 + timedelta(minutes=20) and c.idle_s == 61 * 60 and c.due


def test_memory_held_at_zero_is_not_use():
    assert clock([[90] * 20 + [0] * 61], 81, memory_gib=60).due


def test_a_brief_burst_does_not_stop_the_clock_but_lasting_work_does():
    bursts = [90] * 20 + ([0] * 9 + [100]) * 6  # a dummy kernel every ten minutes
    assert clock([bursts], 80).since == T0 + timedelta(minutes=20)
    assert not clock([[90] * 20 + [0] * 50 + [80] * 6 + [0] * 4], 80).due


def test_one_busy_gpu_of_four_keeps_the_job_off_the_clock():
    assert not clock([[80] * 90] + [[0] * 90] * 3, 90).due


def test_staging_before_the_first_kernel_has_a_longer_threshold():
    assert not clock([[0] * 90], 90).due  # staging: 2 h allowed
    staged = clock([[0] * 121], 121)
    assert staged.due and not staged.worked and staged.threshold_s == 7200


def test_no_sample_no_clock():
    assert zero_use(series=[series("n1/0", [])], start=T0, now=T0 + timedelta(hours=3)) is None


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_running_job_at_zero_is_warned_once_with_its_evidence():
    from gpuquota.core.models import AuditEntry
    from gpuquota.jobs.alerts import jobs_zero_use_scan
    from gpuquota.jobs.models import Job
    from gpuquota.jobs.services import jobs_collect
    from gpuquota.mail.models import MailDelivery
    from gpuquota.schedulers.models import SlurmJob
    from tests.jobs.world import JobWorld

    world = JobWorld.build()
    world.slurm_job("501", utils=[[90] * 20 + [0] * 70, [0] * 90])
    SlurmJob.objects.filter(job_id="501").update(ended_at=None, state="RUNNING")
    now = T0 + timedelta(minutes=90)
    jobs_collect(now=now, since=T0 - timedelta(hours=1))
    assert jobs_zero_use_scan(now=now - timedelta(minutes=15)) == 0  # 55 min at zero
    assert jobs_zero_use_scan(now=now) == 1
    assert jobs_zero_use_scan(now=now + timedelta(minutes=2)) == 0  # once per stretch
    job = Job.objects.get(job_id="501")
    assert job.zero_use_since == T0 + timedelta(minutes=20)
    entry = AuditEntry.objects.get(action="jobs.zero_use_warned")
    assert entry.changes["idle_s"] == 70 * 60 and entry.changes["gpus"] == [
        "h100-node-00/0", "h100-node-00/1"]
    mail = MailDelivery.objects.get(template="jobs_zero_use")
    assert mail.recipient == world.member and "70" in mail.context_json


@pytest.mark.postgres
@pytest.mark.django_db
def test_only_where_the_site_opted_in_is_a_job_warned_a_last_time_and_then_stopped(settings):
    """The policy's steps without a scheduler (the dev Slurm cluster's and the fake
    Kubernetes API server's tests stop real jobs): the last warning comes
    JOBS_ZERO_USE_LAST_WARNING_S before the stop and the stop no sooner after it; a cluster
    whose backend does not write refuses, audited and retried 15 minutes later."""
    from gpuquota.core.models import AuditEntry
    from gpuquota.jobs.alerts import jobs_zero_use_scan
    from gpuquota.jobs.models import Job
    from gpuquota.jobs.services import jobs_collect
    from gpuquota.mail.models import MailDelivery
    from gpuquota.schedulers.models import BackendConfig, SlurmJob
    from tests.jobs.world import JobWorld

    world = JobWorld.build()
    world.slurm_job("502", utils=[[90] * 20 + [0] * 160])
    SlurmJob.objects.filter(job_id="502").update(ended_at=None, state="RUNNING")
    BackendConfig.objects.create(cluster=world.cluster, mode="export")
    jobs_collect(now=T0 + timedelta(minutes=180), since=T0 - timedelta(hours=1))
    assert jobs_zero_use_scan(now=T0 + timedelta(minutes=82)) == 1
    assert '"cancel_at": null' in MailDelivery.objects.get(template="jobs_zero_use").context_json
    late = T0 + timedelta(minutes=145)  # 125 min at zero: past the warning and an hour
    jobs_zero_use_scan(now=late)
    settings.JOBS_ZERO_USE_CANCEL = "della:interactive"  # another partition
    jobs_zero_use_scan(now=late)
    assert not AuditEntry.objects.filter(action__startswith="jobs.zero_use_").exclude(
        action="jobs.zero_use_warned").exists()  # not opted in: warned only
    settings.JOBS_ZERO_USE_CANCEL = "@vision"  # the team opted in
    jobs_zero_use_scan(now=late)  # the last warning first, never the stop in the same scan
    last = AuditEntry.objects.get(action="jobs.zero_use_last_warned")
    assert last.changes["stop_at"] == (late + timedelta(minutes=15)).isoformat()
    assert MailDelivery.objects.get(template="jobs_zero_use_last").recipient == world.member
    jobs_zero_use_scan(now=late + timedelta(minutes=14))  # due, but too soon after it
    assert not AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").exists()
    stop = late + timedelta(minutes=15)
    jobs_zero_use_scan(now=stop)
    failed = AuditEntry.objects.get(action="jobs.zero_use_cancel_failed")
    assert "does not write" in failed.reason and failed.changes["last_warned_at"]
    jobs_zero_use_scan(now=stop + timedelta(minutes=2))  # not retried at every scan
    assert AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").count() == 1
    jobs_zero_use_scan(now=stop + timedelta(minutes=15))
    assert AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").count() == 2
    again = AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").latest("pk")
    assert again.changes["refusals"] == 2
    assert again.changes["retry_at"] == (stop + timedelta(minutes=45)).isoformat()
    jobs_zero_use_scan(now=stop + timedelta(minutes=44))  # backs off: 30 min after the 2nd
    assert AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").count() == 2
    jobs_zero_use_scan(now=stop + timedelta(minutes=45))
    assert AuditEntry.objects.filter(action="jobs.zero_use_cancel_failed").count() == 3
    assert Job.objects.get(job_id="502").zero_use_cancelled_at is None
    assert MailDelivery.objects.filter(template="jobs_zero_use_last").count() == 1  # once


def test_only_a_slurm_job_id_reaches_a_slurm_command():
    from gpuquota.schedulers.slurm.jobstop import SLURM_JOB_ID

    assert SLURM_JOB_ID.match("123") and SLURM_JOB_ID.match("123_4")
    assert not SLURM_JOB_ID.match("123; rm -rf /") and not SLURM_JOB_ID.match("-1")


def test_a_refused_stop_backs_off_to_four_hours():
    from gpuquota.jobs.cancel import retry_after

    assert [retry_after(n) for n in range(1, 7)] == [
        timedelta(minutes=m) for m in (15, 30, 60, 120, 240, 240)]
