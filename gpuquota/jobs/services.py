"""Writes of the job reports: collect the jobs, store a finished job's report once its
samples have settled, mail its owner when it wasted GPU-hours (through the mail outbox, in
the transaction that stores the report; at most one such mail per user a day; never to a
user who opted out), and the opt-out itself."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.jobs import conf
from gpuquota.jobs.collect import process_jobs_collect, slurm_jobs_collect
from gpuquota.jobs.models import Job, JobCollectMark, JobMailOptOut, JobNote
from gpuquota.jobs.report import JobReport, Prices, job_report, jobs_series
from gpuquota.jobs.told_owner import job_tell
from gpuquota.mail.outbox import mail_send_later

#: Each refresh looks this far back for jobs that ran (the task runs every few minutes).
LOOKBACK = timedelta(days=2)
#: A finished job older than this is reported without mail (a site turning reports on late).
TOO_OLD_TO_MAIL = timedelta(days=2)


def _records_since(marks: dict[int, JobCollectMark], cluster: Cluster,
                   now: datetime) -> datetime | None:
    """Where this pass reads the cluster's process records from: its mark less the overlap,
    or None (the whole lookback) with no mark, a mark in the future or a full read due."""
    mark = marks.get(cluster.pk)
    if mark is None or mark.records_until > now or (
            now - mark.full_at >= timedelta(seconds=conf.collect_full_every_s())):
        return None
    return max(now - LOOKBACK, mark.records_until - timedelta(
        seconds=conf.collect_overlap_s()))


def jobs_collect(*, now: datetime, since: datetime | None = None) -> int:
    """Jobs of every cluster that ran since `since` (default: LOOKBACK); returns how many
    were written. Without `since` (the periodic task) the process records are read
    incrementally: from each cluster's mark less `JOBS_COLLECT_OVERLAP_S`, the whole
    lookback at least every `JOBS_COLLECT_FULL_EVERY_S`; the mark moves to `now`."""
    lookback = since or now - LOOKBACK
    marks = {} if since else {m.cluster_id: m for m in JobCollectMark.objects.all()}
    written, moved = 0, []
    for cluster in Cluster.objects.order_by("pk"):
        written += slurm_jobs_collect(cluster=cluster, since=lookback, now=now)
        records_since = None if since else _records_since(marks, cluster, now)
        written += process_jobs_collect(cluster=cluster, since=records_since or lookback,
                                        now=now)
        moved.append(JobCollectMark(cluster=cluster, records_until=now, full_at=now
                                    if records_since is None else marks[cluster.pk].full_at))
    if not since:  # every cluster's mark in one statement
        JobCollectMark.objects.bulk_create(moved, update_conflicts=True,
                                           unique_fields=["cluster"],
                                           update_fields=["records_until", "full_at"])
    return written


def _pct(value: float | None):
    return None if value is None else round(value, 1)


def job_report_store(*, job: Job, now: datetime, notify: bool = True,
                     report: JobReport | None = None) -> JobReport:
    """Store a finished job's report (its figures and notes) and queue its owner's mail if it
    was wasteful; the report is final: a job reported is never collected again. `report`:
    computed by the caller (from reads shared by many jobs)."""
    report = report or job_report(job=job, now=now)
    a = report.analysis
    with transaction.atomic():
        job.held_gpu_s, job.idle_gpu_s, job.wasted_gpu_s = a.held_gpu_s, a.idle_gpu_s, \
            a.wasted_gpu_s
        job.util_avg_pct = _pct(a.util_avg_pct)
        job.cost, job.currency = report.cost, report.currency
        job.wasted_cost = report.wasted_cost(a.wasted_gpu_s)
        job.reported_at = now
        job.save()
        job.notes.all().delete()
        JobNote.objects.bulk_create([
            JobNote(job=job, code=n.code, severity=n.severity, title=n.title[:300],
                    advice=n.advice[:500], wasted_gpu_s=n.wasted_gpu_s,
                    wasted_cost=report.wasted_cost(n.wasted_gpu_s))
            for n in a.notes])
        if notify:
            job_notify(job=job, now=now)
    return report


def jobs_report_due(*, now: datetime, limit: int = 500) -> int:
    """Report every job that ended at least `report_settle_s` ago and has no report yet;
    returns how many were reported."""
    settled = now - timedelta(seconds=conf.report_settle_s())
    due = list(Job.objects.filter(reported_at__isnull=True, ended_at__isnull=False,
                                  ended_at__lte=settled)
               .select_related("owner", "cluster").order_by("ended_at", "pk")[:limit])
    # The samples and prices of all the jobs due in a few queries; then one transaction each.
    found = jobs_series(jobs=due, end=now, ends={job.pk: job.ended_at for job in due})
    prices = Prices([gpu for _series, gpus in found.values() for gpu in gpus])
    count = 0
    for job in due:
        report = job_report(job=job, now=now, series_gpus=found[job.pk], prices=prices)
        job_report_store(job=job, now=now, notify=now - job.ended_at <= TOO_OLD_TO_MAIL,
                         report=report)
        count += 1
    return count


def jobs_refresh(*, now: datetime) -> dict:
    """The periodic task's one call: collect, then report what is due."""
    return {"collected": jobs_collect(now=now), "reported": jobs_report_due(now=now)}


def _notify_blocked(job: Job, now: datetime) -> str:
    if not conf.notify_enabled():
        return "off"
    if job.owner is None:
        return "no owner"
    if job.wasted_gpu_s < conf.notify_min_waste_gpu_s():
        return "not wasteful enough"
    if JobMailOptOut.objects.filter(user=job.owner).exists():
        return "opted out"
    recent = now - timedelta(seconds=conf.notify_interval_s())
    if Job.objects.filter(owner=job.owner, notified_at__gt=recent).exists():
        return "mailed recently"
    return ""


def job_notify(*, job: Job, now: datetime) -> bool:
    """Queue the mail that tells a job's owner what it wasted and how to avoid it, unless
    blocked (see `_notify_blocked`); True when queued. Runs in the caller's transaction."""
    if _notify_blocked(job, now):
        return False
    notes = list(job.notes.filter(severity="waste").order_by("-wasted_gpu_s"))
    context = {
        "job_pk": job.pk, "job_id": job.job_id, "cluster": job.cluster.name,
        "source": job.get_source_display(), "started_at": job.started_at,
        "ended_at": job.ended_at, "gpus": job.gpus_held,
        "wasted_hours": f"{job.wasted_gpu_s / 3600:.1f}",
        "wasted_cost": job.wasted_cost, "currency": job.currency,
        "notes": [{"title": n.title, "advice": n.advice,
                   "hours": f"{n.wasted_gpu_s / 3600:.1f}"} for n in notes],
    }
    mail_send_later(template="jobs_wasteful", recipients=[job.owner], context=context,
                    key=f"jobs.wasteful.{job.pk}")
    job_tell(job, event="job.wasteful", key=f"jobs.wasteful.{job.pk}",
             title=f"{context['wasted_hours']} GPU-hours wasted",
             text="; ".join(f"{n['title']}: {n['advice']}" for n in context["notes"])
             or "See the job's report.",
             facts=[("Wasted", f"{context['wasted_hours']} GPU-hours"),
                    ("Cost", f"{job.wasted_cost} {job.currency}")],
             data={"wasted_gpu_s": job.wasted_gpu_s})
    job.notified_at = now
    job.save(update_fields=["notified_at"])
    return True


def job_mail_opt_out_set(*, user, opted_out: bool, now: datetime) -> None:
    """Stop (or resume) mail about the user's wasteful jobs; audited."""
    with transaction.atomic():
        if opted_out:
            _row, created = JobMailOptOut.objects.get_or_create(user=user,
                                                                defaults={"created_at": now})
        else:
            created = bool(JobMailOptOut.objects.filter(user=user).delete()[0])
        if created:
            audit_record(actor=user, obj=user,
                         action="jobs.mail_opt_out" if opted_out else "jobs.mail_opt_in")
