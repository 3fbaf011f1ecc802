"""Zero-use warnings (docs/jobs.md, Zero-use warnings): a running job whose GPUs have all
been at zero past its threshold (`zero_use.py` says what counts) is warned once per stretch
of zero use: its owner is mailed through the mail outbox and told on the channels they
added (`told_owner.py`), its team's channels are told (`told.py`), and the evidence (since
when, how far the samples go, its GPUs) is audited, in one transaction. Where the site opted in,
a warned job still at zero gets a last warning `JOBS_ZERO_USE_LAST_WARNING_S` before it is
stopped, and is stopped no sooner than that after it (`cancel.py`); one step per job per
scan, each mail and channel message once (its key). The scan reads the running
jobs and their samples in a few queries whatever their number; only a warning or a
cancellation writes, one transaction each."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.jobs import conf
from gpuquota.jobs.cancel import cancel_opted_in, planned_action, retry_after, zero_use_cancel
from gpuquota.jobs.models import Job, JobMailOptOut
from gpuquota.jobs.report import jobs_series
from gpuquota.jobs.told import zero_use_last_warning_tell, zero_use_warned_tell
from gpuquota.jobs.told_owner import job_tell
from gpuquota.jobs.zero_use import ZeroUse, zero_use
from gpuquota.mail.outbox import mail_send_later
from gpuquota.outbox.render import when_utc


def _mailable(job: Job) -> bool:
    return job.owner is not None and not JobMailOptOut.objects.filter(user=job.owner).exists()


def _stop_due_at(clock: ZeroUse) -> datetime:
    return clock.due_at + timedelta(seconds=conf.zero_use_cancel_after_s())


def _warn(job: Job, clock: ZeroUse, keys: list[str], now: datetime) -> None:
    with transaction.atomic():
        job.zero_use_since, job.zero_use_warned_at = clock.since, now
        job.zero_use_cancel_failures = 0  # a new stretch: its stop is tried afresh
        job.save(update_fields=["zero_use_since", "zero_use_warned_at",
                                "zero_use_cancel_failures"])
        audit_record(actor=None, action="jobs.zero_use_warned", obj=job, team=job.team,
                     changes={"zero_since": clock.since.isoformat(),
                              "seen_until": clock.seen_until.isoformat(),
                              "idle_s": clock.idle_s, "threshold_s": clock.threshold_s,
                              "worked_before": clock.worked, "gpus": keys})
        key = f"jobs.zero_use.{job.pk}.{int(clock.since.timestamp())}"
        opted_in = cancel_opted_in(job)
        cancel_at = _stop_due_at(clock) if opted_in else None
        action = planned_action(job) if opted_in else ""
        zero_use_warned_tell(job, clock, key=key, gpus=keys, stop_at=cancel_at, action=action)
        job_tell(job, event="job.zero_use_warned", key=key, title="GPUs at zero use",
                 text=(f"Its GPUs ({', '.join(keys)}) have been at zero since "
                       f"{when_utc(clock.since)} ({clock.idle_s // 60} minutes)."),
                 facts=[("Zero since", when_utc(clock.since))],
                 data={"since": clock.since.isoformat(), "gpus": keys})
        if _mailable(job):
            mail_send_later(
                template="jobs_zero_use", recipients=[job.owner], key=key,
                context={"job_pk": job.pk, "job_id": job.job_id, "cluster": job.cluster.name,
                         "gpus": keys, "since": clock.since, "idle_minutes": clock.idle_s // 60,
                         "staging": not clock.worked, "cancel_at": cancel_at,
                         "action": action})


def _last_warn(job: Job, clock: ZeroUse, keys: list[str], now: datetime) -> None:
    stop_at = now + timedelta(seconds=conf.zero_use_last_warning_s())
    with transaction.atomic():
        job.zero_use_last_warned_at = now
        job.save(update_fields=["zero_use_last_warned_at"])
        audit_record(actor=None, action="jobs.zero_use_last_warned", obj=job, team=job.team,
                     changes={"zero_since": clock.since.isoformat(),
                              "seen_until": clock.seen_until.isoformat(),
                              "idle_s": clock.idle_s, "stop_at": stop_at.isoformat(),
                              "action": planned_action(job), "gpus": keys})
        key = f"jobs.zero_use_last.{job.pk}.{int(clock.since.timestamp())}"
        action = planned_action(job)
        zero_use_last_warning_tell(job, clock, key=key, gpus=keys, stop_at=stop_at,
                                   action=action)
        job_tell(job, event="job.zero_use_last_warning", key=key, title="last warning: zero use",
                 text=(f"Its GPUs have been at zero since {when_utc(clock.since)}; it is "
                       f"stopped ({planned_action(job)}) at {when_utc(stop_at)} unless they "
                       "are used."),
                 facts=[("Zero since", when_utc(clock.since)), ("Stopped at", when_utc(stop_at))],
                 data={"since": clock.since.isoformat(), "stop_at": stop_at.isoformat(),
                       "gpus": keys})
        if _mailable(job):
            mail_send_later(
                template="jobs_zero_use_last", recipients=[job.owner], key=key,
                context={"job_pk": job.pk, "job_id": job.job_id, "cluster": job.cluster.name,
                         "gpus": keys, "since": clock.since, "idle_minutes": clock.idle_s // 60,
                         "stop_at": stop_at, "action": action})


def _last_warned(job: Job) -> bool:
    """Whether the last warning went out in this stretch (after its first warning)."""
    return (job.zero_use_last_warned_at is not None and job.zero_use_warned_at is not None
            and job.zero_use_last_warned_at >= job.zero_use_warned_at)


def _next_step(job: Job, clock: ZeroUse | None, now: datetime) -> str:
    """What the scan does to the job now: `warn`, `last_warn`, `stop` or nothing ('')."""
    if clock is None or not clock.due:
        return ""
    if job.zero_use_since != clock.since:
        return "warn"  # a new stretch of zero use
    if job.zero_use_cancelled_at is not None or not cancel_opted_in(job):
        return ""
    last_s = conf.zero_use_last_warning_s()
    left_s = clock.threshold_s + conf.zero_use_cancel_after_s() - clock.idle_s  # till stop
    if not _last_warned(job):
        return "last_warn" if left_s <= last_s and now > job.zero_use_warned_at else ""
    failed = job.zero_use_cancel_failed_at
    if (left_s <= 0 and now >= job.zero_use_last_warned_at + timedelta(seconds=last_s)
            and (failed is None or now - failed >= retry_after(job.zero_use_cancel_failures))):
        return "stop"
    return ""


def jobs_zero_use_scan(*, now: datetime) -> int:
    """Warn every running job at zero past its threshold and not yet warned for this
    stretch; where the site opted in, warn those still at zero a last time and then stop
    them; returns how many were warned (first warnings)."""
    rules = conf.zero_use_rules()
    warned = 0
    running = list(Job.objects.filter(ended_at__isnull=True)
                   .select_related("cluster", "owner", "team").order_by("pk"))
    series_of = jobs_series(jobs=running, end=now)  # the samples of all, in two queries
    for job in running:
        series, _gpus = series_of[job.pk]
        clock = zero_use(series=series, start=job.started_at, now=now, rules=rules)
        step = _next_step(job, clock, now)
        keys = [s.key for s in series]
        if step == "warn":
            _warn(job, clock, keys, now)
            warned += 1
        elif step == "last_warn":
            _last_warn(job, clock, keys, now)
        elif step == "stop":
            zero_use_cancel(job=job, clock=clock, now=now, gpus=keys)
    return warned
