"""Zero-use warnings (docs/jobs.md, Zero-use warnings): a running job whose GPUs have all
been at zero past its threshold (`zero_use.py` says what counts) is warned once per stretch
of zero use: its owner is mailed through the mail outbox, and the evidence (since when,
how far the samples go, its GPUs) is audited, in one transaction. Where the site opted in,
a warned job still at zero later is cancelled (`cancel.py`). The scan reads the running
jobs and their samples in a few queries whatever their number; only a warning or a
cancellation writes, one transaction each."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.jobs import conf
from gpuquota.jobs.cancel import RETRY, cancel_opted_in, zero_use_cancel
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.report import jobs_series
from gpuquota.jobs.zero_use import ZeroUse, zero_use
from gpuquota.mail.outbox import mail_send_later


def _warn(job: Job, clock: ZeroUse, keys: list[str], now: datetime) -> None:
    with transaction.atomic():
        job.zero_use_since, job.zero_use_warned_at = clock.since, now
        job.save(update_fields=["zero_use_since", "zero_use_warned_at"])
        audit_record(actor=None, action="jobs.zero_use_warned", obj=job, team=job.team,
                     changes={"zero_since": clock.since.isoformat(),
                              "seen_until": clock.seen_until.isoformat(),
                              "idle_s": clock.idle_s, "threshold_s": clock.threshold_s,
                              "worked_before": clock.worked, "gpus": keys})
        if job.owner is not None and not JobMailOptOut.objects.filter(user=job.owner).exists():
            mail_send_later(
                template="jobs_zero_use", recipients=[job.owner],
                key=f"jobs.zero_use.{job.pk}.{int(clock.since.timestamp())}",
                context={"job_pk": job.pk, "job_id": job.job_id, "cluster": job.cluster.name,
                         "gpus": keys, "since": clock.since, "idle_minutes": clock.idle_s // 60,
                         "staging": not clock.worked,
                         "cancel_at": clock.due_at + timedelta(
                             seconds=conf.zero_use_cancel_after_s())
                         if cancel_opted_in(job) else None})


def _cancel_due(job: Job, clock: ZeroUse, now: datetime) -> bool:
    failed = job.zero_use_cancel_failed_at
    return (job.zero_use_since == clock.since and job.zero_use_cancelled_at is None
            and (failed is None or now - failed >= RETRY)
            and clock.idle_s >= clock.threshold_s + conf.zero_use_cancel_after_s()
            and cancel_opted_in(job))


def jobs_zero_use_scan(*, now: datetime) -> int:
    """Warn every running job at zero past its threshold and not yet warned for this
    stretch, and cancel those warned that stayed at zero where the site opted in; returns
    how many were warned."""
    rules = conf.zero_use_rules()
    warned = 0
    running = list(Job.objects.filter(ended_at__isnull=True)
                   .select_related("cluster", "owner", "team").order_by("pk"))
    series_of = jobs_series(jobs=running, end=now)  # the samples of all, in two queries
    for job in running:
        series, _gpus = series_of[job.pk]
        clock = zero_use(series=series, start=job.started_at, now=now, rules=rules)
        if clock is not None and _cancel_due(job, clock, now):
            zero_use_cancel(job=job, clock=clock, now=now)
            continue
        if clock is None or not clock.due or job.zero_use_since == clock.since:
            continue
        _warn(job, clock, [s.key for s in series], now)
        warned += 1
    return warned
