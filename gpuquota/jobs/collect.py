"""Jobs from what gpuquota already sees (docs/jobs.md, Where jobs come from): a Slurm job's
run from its accounting (`SlurmJob`) with the GPUs slurmctld said it held (`SlurmJobGpu`, else
those its processes ran on); a pod, a container or a bare process from the agents' process
records, its GPUs those its processes ran on, ended once no record has come for
`report_settle_s`. A job already reported is final and left alone."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Min, Q

from accounts.models import ClusterIdentity
from gpuquota.ingest.models import ProcessRecord
from gpuquota.inventory.models import Cluster
from gpuquota.jobs import conf
from gpuquota.jobs.models import Job, JobGpu
from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu
from gpuquota.usage.owners import OwnerResolver

Source = Job.Source
_SOURCE_OF_RECORD = {"kubernetes": Source.KUBERNETES, "docker": Source.DOCKER,
                     "unix": Source.UNIX, None: Source.UNIX}


def _owner_id(cluster_id: int, user_name: str, at: datetime) -> int | None:
    """The user mapped from the cluster's unix user name at `at`, if any."""
    if not user_name:
        return None
    return (ClusterIdentity.objects
            .filter(cluster_id=cluster_id, kind=ClusterIdentity.Kind.UNIX_USER, key=user_name,
                    valid_from__lte=at)
            .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at))
            .values_list("user_id", flat=True).first())


def _job_upsert(*, cluster: Cluster, source: str, job_id: str, started_at: datetime,
                fields: dict, gpu_ids: set[int]) -> Job | None:
    job = Job.objects.filter(cluster=cluster, source=source, job_id=job_id,
                             started_at=started_at).first()
    if job is not None and job.reported_at is not None:
        return None
    if job is None:
        job = Job(cluster=cluster, source=source, job_id=job_id, started_at=started_at)
    for name, value in fields.items():
        setattr(job, name, value)
    job.gpus_held = len(gpu_ids)
    job.save()
    known = set(job.job_gpus.values_list("gpu_id", flat=True))
    JobGpu.objects.bulk_create([JobGpu(job=job, gpu_id=g) for g in gpu_ids - known])
    return job


def _slurm_gpu_ids(run: SlurmJob, end: datetime) -> set[int]:
    held = set(SlurmJobGpu.objects.filter(
        cluster_id=run.cluster_id, job_id=run.job_id, gpu__isnull=False,
        first_seen_at__lt=end, last_seen_at__gte=run.started_at,
    ).values_list("gpu_id", flat=True))
    if held:
        return held
    return set(ProcessRecord.objects.filter(
        job_source="slurm", job_id=run.job_id, window_start__gte=run.started_at,
        window_start__lt=end, gpu__node__cluster_id=run.cluster_id,
    ).values_list("gpu_id", flat=True))


def slurm_jobs_collect(*, cluster: Cluster, since: datetime, now: datetime) -> int:
    """Jobs for the cluster's Slurm runs that started and ran after `since`; returns how
    many were written."""
    interactive = conf.interactive_partitions()
    runs = SlurmJob.objects.filter(cluster=cluster, started_at__isnull=False).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=since))
    reported = set(Job.objects.filter(cluster=cluster, source=Source.SLURM,
                                      reported_at__isnull=False, started_at__gte=since
                                      - timedelta(days=30))
                   .values_list("job_id", "started_at"))
    written = 0
    for run in runs.order_by("started_at"):
        if (run.job_id, run.started_at) in reported:
            continue  # final: not read again
        end = run.ended_at or now
        gpu_ids = _slurm_gpu_ids(run, end)
        if not gpu_ids and not run.gpus:
            continue  # a CPU job: nothing to report
        fields = {
            "ended_at": run.ended_at, "state": run.state, "user_name": run.user,
            "account": run.account, "partition": run.partition,
            "time_limit_s": run.time_limit_s,
            "interactive": run.partition in interactive, "team_id": run.team_id,
            "owner_id": _owner_id(cluster.pk, run.user, run.started_at),
        }
        with transaction.atomic():
            if _job_upsert(cluster=cluster, source=Source.SLURM, job_id=run.job_id,
                           started_at=run.started_at, fields=fields, gpu_ids=gpu_ids):
                written += 1
    return written


def _record_key(row: dict) -> tuple[str, str]:
    source = _SOURCE_OF_RECORD.get(row["job_source"], Source.UNIX)
    if row["job_id"] and source != Source.UNIX:
        return source, row["job_id"]
    return Source.UNIX, f"{row['pid']}@{row['pid_start']}"


def process_jobs_collect(*, cluster: Cluster, since: datetime, now: datetime) -> int:
    """Jobs for the pods, containers and bare processes seen on the cluster's GPUs since
    `since` (Slurm's processes are its jobs'); returns how many were written."""
    rows = (ProcessRecord.objects
            .filter(gpu__node__cluster=cluster, window_start__gte=since, window_start__lt=now)
            .exclude(job_source="slurm")
            .values("job_source", "job_id", "pid", "pid_start", "gpu_id", "user", "job_account")
            .annotate(first=Min("window_start"), last=Max("window_end")))
    jobs: dict[tuple[str, str], dict] = defaultdict(lambda: {"gpus": set(), "first": None,
                                                             "last": None})
    for row in rows:
        job = jobs[_record_key(row)]
        job["gpus"].add(row["gpu_id"])
        job["first"] = min(filter(None, [job["first"], row["first"]]))
        job["last"] = max(filter(None, [job["last"], row["last"]]))
        job["user"], job["account"] = row["user"] or "", row["job_account"] or ""
    settle = timedelta(seconds=conf.report_settle_s())
    resolver = OwnerResolver(cluster_ids={cluster.pk}, start=since, end=now)
    written = 0
    for (source, job_id), seen in jobs.items():
        earlier = (Job.objects.filter(cluster=cluster, source=source, job_id=job_id,
                                      reported_at__isnull=True).order_by("-started_at").first())
        start = min(seen["first"], earlier.started_at) if earlier else seen["first"]
        if earlier:
            seen["gpus"] |= set(earlier.job_gpus.values_list("gpu_id", flat=True))
        ended = seen["last"] if now - seen["last"] >= settle else None
        record_source = "kubernetes" if source == Source.KUBERNETES else source
        fields = {
            "ended_at": ended, "state": "ENDED" if ended else "RUNNING",
            "user_name": seen["user"], "account": seen["account"],
            "interactive": False,
            "owner_id": _owner_id(cluster.pk, seen["user"], start),
            "team_id": resolver.team_id(cluster_id=cluster.pk, job_source=record_source,
                                        job_account=seen["account"], user=seen["user"],
                                        uid=None, at_s=int(start.timestamp())),
        }
        with transaction.atomic():
            if earlier and earlier.started_at != start:
                earlier.started_at = start
                earlier.save(update_fields=["started_at"])
            if _job_upsert(cluster=cluster, source=source, job_id=job_id, started_at=start,
                           fields=fields, gpu_ids=seen["gpus"]):
                written += 1
    return written
