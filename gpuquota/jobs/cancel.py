"""Cancelling a zero-use job where the site opted in (docs/jobs.md, Cancelling): only on a
Slurm cluster (or one of its partitions) named in `JOBS_ZERO_USE_CANCEL`, whose backend
writes (not export-only or off), once the job has been warned and stayed at zero
`JOBS_ZERO_USE_CANCEL_AFTER_S` longer. `scancel` through the backend's one runner, then
read back: the job is cancelled when `squeue` no longer shows it running. The evidence is
audited whatever the outcome; the owner is mailed when it is done."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.jobs import conf
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.zero_use import ZeroUse
from gpuquota.mail.outbox import mail_send_later
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.models import BackendConfig

#: What a Slurm job id looks like (an array task: 123_4); nothing else reaches scancel.
SLURM_JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?$")
GONE = {"", "CANCELLED", "COMPLETING", "COMPLETED"}
RETRY = timedelta(minutes=15)


def cancel_opted_in(job: Job) -> bool:
    """Whether the site opted in for this job's cluster, or its partition."""
    chosen = conf.zero_use_cancel()
    return job.source == Job.Source.SLURM and (
        job.cluster.slug in chosen or f"{job.cluster.slug}:{job.partition}" in chosen)


def _scancel(job: Job) -> str:
    """'' when Slurm shows the job gone after scancel, else why not."""
    if not SLURM_JOB_ID.match(job.job_id):
        return f"not a Slurm job id: {job.job_id!r}"
    config = BackendConfig.objects.filter(cluster=job.cluster).first()
    if config is None or config.mode != BackendConfig.Mode.WRITE:
        return "the cluster's scheduler backend does not write (export-only, off or none)"
    backend = backend_for(job.cluster, config)
    try:
        backend.runner.run(["scancel", job.job_id])
        state = backend.runner.run(["squeue", "-h", "-j", job.job_id, "-o", "%T"],
                                   check=False).stdout.strip()
    except BackendError as exc:
        return exc.message
    return "" if state in GONE else f"squeue still shows it {state}"


def zero_use_cancel(*, job: Job, clock: ZeroUse, now: datetime) -> bool:
    """Cancel `job` (due, warned, opted in: the caller checked) and audit it; True when
    Slurm shows it gone."""
    failure = _scancel(job)
    with transaction.atomic():
        if not failure:
            job.zero_use_cancelled_at, job.state = now, "CANCELLED"
            job.save(update_fields=["zero_use_cancelled_at", "state"])
        else:  # tried again after RETRY, not at every scan
            job.zero_use_cancel_failed_at = now
            job.save(update_fields=["zero_use_cancel_failed_at"])
        audit_record(actor=None, obj=job, team=job.team,
                     action="jobs.zero_use_cancelled" if not failure
                     else "jobs.zero_use_cancel_failed",
                     changes={"zero_since": clock.since.isoformat(),
                              "seen_until": clock.seen_until.isoformat(),
                              "idle_s": clock.idle_s, "warned_at":
                              job.zero_use_warned_at.isoformat() if job.zero_use_warned_at
                              else None},
                     reason=failure)
        if not failure and job.owner is not None and not JobMailOptOut.objects.filter(
                user=job.owner).exists():
            mail_send_later(template="jobs_zero_use_cancelled", recipients=[job.owner],
                            key=f"jobs.zero_use_cancelled.{job.pk}",
                            context={"job_pk": job.pk, "job_id": job.job_id,
                                     "cluster": job.cluster.name, "since": clock.since,
                                     "idle_minutes": clock.idle_s // 60})
    return not failure
