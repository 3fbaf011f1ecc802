"""Stopping a zero-use job where the site opted in (docs/jobs.md, Stopping): only a Slurm job
or a Kubernetes pod in a scope named in `JOBS_ZERO_USE_CANCEL` (its cluster, partition or
namespace, or its team), on a cluster whose backend writes (not export-only or off), after
its first warning and a last one `JOBS_ZERO_USE_LAST_WARNING_S` before. Stopped through the
cluster's scheduler backend (`Backend.job_stop`), which reads it back: a Slurm job is
cancelled, or requeued where `JOBS_ZERO_USE_REQUEUE` says so and Slurm can; a bare pod is
deleted, a batch Job's pod stops with its Job suspended (or its Kueue Workload deactivated).
The evidence is audited whatever the outcome; the owner is mailed when it is done, and the
team's channels hear of the stop, or of its first refusal in the stretch."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.jobs import conf
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.told import zero_use_stopped_tell
from gpuquota.jobs.told_owner import job_tell
from gpuquota.jobs.zero_use import ZeroUse
from gpuquota.mail.outbox import mail_send_later
from gpuquota.outbox.render import when_utc
from gpuquota.schedulers.backend import BackendError, JobStopped, backend_for
from gpuquota.schedulers.models import BackendConfig, Capabilities

RETRY = timedelta(minutes=15)
RETRY_MAX = timedelta(hours=4)
STOPPABLE = (Job.Source.SLURM, Job.Source.KUBERNETES)


def retry_after(failures: int) -> timedelta:
    """How long after its last refusal a stop is tried again: 15 min, doubled at each
    refusal of the stretch, at most 4 h (a cluster whose backend keeps refusing is not
    asked 96 times a day per idle job)."""
    return min(RETRY * 2 ** max(failures - 1, 0), RETRY_MAX)


def _scopes(job: Job) -> set[str]:
    """The names a policy may give the job by: its cluster, partition (Slurm) or namespace
    (Kubernetes) of it, and its team."""
    where = job.partition if job.source == Job.Source.SLURM else job.account
    return {job.cluster.slug, f"{job.cluster.slug}:{where}"} | (
        {f"@{job.team.slug}"} if job.team is not None else set())


def cancel_opted_in(job: Job) -> bool:
    """Whether the site opted in to stop this job at zero (its cluster, partition or
    namespace, or team)."""
    return job.source in STOPPABLE and bool(_scopes(job) & conf.zero_use_cancel())


def requeue_wanted(job: Job) -> bool:
    """Whether the policy asks for a requeue rather than a cancellation (Slurm only)."""
    return job.source == Job.Source.SLURM and bool(_scopes(job) & conf.zero_use_requeue())


def planned_action(job: Job) -> str:
    """What the mails say will happen to the job: a requeue only where the policy asks for
    one and the cluster's Slurm requeues (its last capabilities: JobRequeue)."""
    if job.source == Job.Source.KUBERNETES:
        return "stopped (a bare pod deleted, a Job suspended)"
    if not requeue_wanted(job):
        return "cancelled"
    facts = Capabilities.objects.filter(cluster=job.cluster).values_list(
        "facts", flat=True).first() or {}
    return "cancelled" if facts.get("requeue") is False else "requeued"


def _stop(job: Job) -> JobStopped | str:
    """What the scheduler showed once the job was stopped, else why not."""
    config = BackendConfig.objects.filter(cluster=job.cluster).first()
    if config is None or config.mode != BackendConfig.Mode.WRITE:
        return "the cluster's scheduler backend does not write (export-only, off or none)"
    try:
        return backend_for(job.cluster, config).job_stop(
            job_id=job.job_id, namespace=job.account, requeue=requeue_wanted(job),
            started_at=job.started_at)
    except BackendError as exc:
        return exc.message


def _owner_mailed(job: Job, clock: ZeroUse, stopped: JobStopped) -> None:
    job_tell(job, event="job.zero_use_stopped", key=f"jobs.zero_use_cancelled.{job.pk}",
             title="stopped for zero use",
             text=(f"Its GPUs were at zero since {when_utc(clock.since)}: {stopped.how}"
                   + (f" ({stopped.note})" if stopped.note else "") + "."),
             facts=[("Zero since", when_utc(clock.since)), ("How", stopped.how)],
             data={"since": clock.since.isoformat(), "how": stopped.how})
    if job.owner is None or JobMailOptOut.objects.filter(user=job.owner).exists():
        return
    mail_send_later(template="jobs_zero_use_cancelled", recipients=[job.owner],
                    key=f"jobs.zero_use_cancelled.{job.pk}",
                    context={"job_pk": job.pk, "job_id": job.job_id,
                             "cluster": job.cluster.name, "since": clock.since,
                             "idle_minutes": clock.idle_s // 60, "how": stopped.how,
                             "note": stopped.note, "target": stopped.target})


def zero_use_cancel(*, job: Job, clock: ZeroUse, now: datetime, gpus: list[str]) -> bool:
    """Stop `job` (due, warned twice, opted in: the caller checked), audit it and tell the
    team's channels (a refusal once per stretch); True when the scheduler shows it
    stopped."""
    outcome = _stop(job)
    done = isinstance(outcome, JobStopped)
    with transaction.atomic():
        if done:
            job.zero_use_cancelled_at, job.zero_use_stopped_how = now, outcome.how
            job.state = outcome.how.upper()
            job.save(update_fields=["zero_use_cancelled_at", "zero_use_stopped_how", "state"])
        else:  # tried again after retry_after(failures), not at every scan
            job.zero_use_cancel_failed_at = now
            job.zero_use_cancel_failures += 1
            job.save(update_fields=["zero_use_cancel_failed_at", "zero_use_cancel_failures"])
        evidence = {"zero_since": clock.since.isoformat(),
                    "seen_until": clock.seen_until.isoformat(), "idle_s": clock.idle_s,
                    "warned_at": job.zero_use_warned_at.isoformat()
                    if job.zero_use_warned_at else None,
                    "last_warned_at": job.zero_use_last_warned_at.isoformat()
                    if job.zero_use_last_warned_at else None,
                    "requeue_asked": requeue_wanted(job)}
        if not done:
            evidence.update(refusals=job.zero_use_cancel_failures,
                            retry_at=(now + retry_after(job.zero_use_cancel_failures)).isoformat())
        if done:
            evidence.update(how=outcome.how, target=outcome.target or job.job_id)
        audit_record(actor=None, obj=job, team=job.team,
                     action="jobs.zero_use_cancelled" if done else "jobs.zero_use_cancel_failed",
                     changes=evidence, reason=outcome.note if done else outcome)
        if done:
            _owner_mailed(job, clock, outcome)
            zero_use_stopped_tell(job, clock, key=f"jobs.zero_use_cancelled.{job.pk}",
                                  gpus=gpus, how=outcome.how, detail=outcome.note,
                                  refused=False)
        else:
            zero_use_stopped_tell(
                job, clock, key=f"jobs.zero_use_refused.{job.pk}.{int(clock.since.timestamp())}",
                gpus=gpus, how="refused", detail=outcome, refused=True)
    return done
