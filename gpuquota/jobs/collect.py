"""Jobs from what gpuquota already sees (docs/jobs.md, Where jobs come from): a Slurm job's
run from its accounting (`SlurmJob`) with the GPUs slurmctld said it held (`SlurmJobGpu`, else
those its processes ran on); a pod, a container or a bare process from the agents' process
records, its GPUs those its processes ran on, ended once no record has come for
`report_settle_s`. A job already reported is final and left alone.

Set-based: a cluster's collection reads its runs, their GPUs, the records, the jobs already
known and the owners in a few bulk queries, whatever the number of jobs, and writes the new
and changed jobs with `bulk_create`/`bulk_update` (issue 34's fleet-scale check)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Exists, IntegerField, Max, Min, OuterRef, Q, Value, When

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
FIELDS = ["ended_at", "state", "user_name", "account", "partition", "interactive", "team_id",
          "owner_id", "last_seen_at"]
PROCESS_SOURCES = (Source.KUBERNETES, Source.DOCKER, Source.UNIX)


class Owners:
    """The users mapped from the cluster's unix user names, read once for all the jobs."""

    def __init__(self, cluster_id: int, names: set[str]):
        self._rows: dict[str, list] = defaultdict(list)
        rows = (ClusterIdentity.objects
                .filter(cluster_id=cluster_id, kind=ClusterIdentity.Kind.UNIX_USER,
                        key__in=[n for n in names if n])
                .values_list("key", "valid_from", "valid_until", "user_id", "pk"))
        for key, valid_from, valid_until, user_id, pk in rows:
            self._rows[key].append((valid_from, pk, valid_until, user_id))
        for found in self._rows.values():
            found.sort(key=lambda row: row[:2])

    def at(self, user_name: str, at: datetime) -> int | None:
        """The user mapped from `user_name` at `at`, if any (the earliest mapping in force)."""
        for valid_from, _pk, valid_until, user_id in self._rows.get(user_name or "", ()):
            if valid_from <= at and (valid_until is None or valid_until > at):
                return user_id
        return None


@dataclass
class _Upsert:
    source: str
    job_id: str
    started_at: datetime
    fields: dict
    gpu_ids: set[int] = field(default_factory=set)


def _jobs_write(cluster: Cluster, upserts: list[_Upsert], known: dict[tuple, Job],
                moved: list[Job] = ()) -> int:
    """Create or update the jobs of `upserts` (`known`: the cluster's jobs of these ids by
    (source, job_id, started_at)); a reported job is final and skipped. Returns how many
    were written. `moved`: unreported jobs whose start moved earlier, saved first."""
    new, changed, pending = [], {}, {}  # pending: by key, the job and the GPUs it held
    written = 0
    for up in upserts:
        key = (up.source, up.job_id, up.started_at)
        job = pending[key][0] if key in pending else known.get(key)
        if job is not None and job.reported_at is not None:
            continue
        written += 1
        fields = {**up.fields, "gpus_held": len(up.gpu_ids)}  # the last run of a key wins
        if job is None:
            job = Job(cluster=cluster, source=up.source, job_id=up.job_id,
                      started_at=up.started_at, **fields)
            new.append(job)
        elif any(getattr(job, name) != value for name, value in fields.items()):  # else as is
            for name, value in fields.items():
                setattr(job, name, value)
            if job.pk is not None:
                changed[id(job)] = job
        pending.setdefault(key, (job, set()))[1].update(up.gpu_ids)
    if not pending:
        return 0
    with transaction.atomic():
        if moved:
            Job.objects.bulk_update(moved, ["started_at"])
        Job.objects.bulk_create(new)
        Job.objects.bulk_update(list(changed.values()), [*FIELDS, "gpus_held"])
        created = {id(job) for job in new}
        have = set(JobGpu.objects.filter(job__in=[j.pk for j, _ in pending.values()
                                                  if id(j) not in created])
                   .values_list("job_id", "gpu_id"))
        JobGpu.objects.bulk_create([JobGpu(job=job, gpu_id=g)
                                    for job, gpu_ids in pending.values()
                                    for g in sorted(gpu_ids) if (job.pk, g) not in have])
    return written


def _slurm_gpu_ids(cluster: Cluster, runs: list[SlurmJob], now: datetime) -> list[set[int]]:
    """For each run, the GPUs slurmctld said it held, else those its processes ran on."""
    held: list[set[int]] = [set() for _ in runs]
    by_job: dict[str, list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        by_job[run.job_id].append(i)
    rows = SlurmJobGpu.objects.filter(cluster=cluster, job_id__in=list(by_job),
                                      gpu__isnull=False).values_list(
        "job_id", "gpu_id", "first_seen_at", "last_seen_at")
    for job_id, gpu_id, first_seen, last_seen in rows:
        for i in by_job[job_id]:
            if first_seen < (runs[i].ended_at or now) and last_seen >= runs[i].started_at:
                held[i].add(gpu_id)
    bare = [i for i, gpus in enumerate(held) if not gpus]
    if bare:  # one query for all: each record is matched to its run by its window
        run_of = Case(*[When(job_id=runs[i].job_id, window_start__gte=runs[i].started_at,
                             window_start__lt=runs[i].ended_at or now, then=Value(i))
                        for i in bare], default=None, output_field=IntegerField())
        rows = (ProcessRecord.objects
                .filter(job_source="slurm", job_id__in={runs[i].job_id for i in bare},
                        window_start__gte=min(runs[i].started_at for i in bare),
                        window_start__lt=max(runs[i].ended_at or now for i in bare),
                        gpu__node__cluster_id=cluster.pk)
                .annotate(run=run_of).filter(run__isnull=False)
                .values_list("run", "gpu_id").distinct())
        for i, gpu_id in rows:
            held[i].add(gpu_id)
    return held


def slurm_jobs_collect(*, cluster: Cluster, since: datetime, now: datetime) -> int:
    """Jobs for the cluster's Slurm runs that started and ran after `since`; returns how
    many were written. A run already reported is not read again."""
    interactive = conf.interactive_partitions()
    reported = Job.objects.filter(cluster=cluster, source=Source.SLURM,
                                  job_id=OuterRef("job_id"), started_at=OuterRef("started_at"),
                                  reported_at__isnull=False)
    runs = list(SlurmJob.objects.filter(cluster=cluster, started_at__isnull=False)
                .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
                .filter(~Exists(reported)).order_by("started_at", "pk"))
    if not runs:
        return 0
    gpus = _slurm_gpu_ids(cluster, runs, now)
    owners = Owners(cluster.pk, {run.user for run in runs})
    upserts = [
        _Upsert(Source.SLURM, run.job_id, run.started_at, {
            "ended_at": run.ended_at, "state": run.state, "user_name": run.user,
            "account": run.account, "partition": run.partition,
            "time_limit_s": run.time_limit_s,
            "interactive": run.partition in interactive, "team_id": run.team_id,
            "owner_id": owners.at(run.user, run.started_at)}, gpu_ids)
        for run, gpu_ids in zip(runs, gpus, strict=True)
        if gpu_ids or run.gpus]  # else a CPU job: nothing to report
    known = {(j.source, j.job_id, j.started_at): j for j in Job.objects.filter(
        cluster=cluster, source=Source.SLURM, job_id__in={u.job_id for u in upserts})}
    return _jobs_write(cluster, upserts, known)


def _record_key(row: dict) -> tuple[str, str]:
    source = _SOURCE_OF_RECORD.get(row["job_source"], Source.UNIX)
    if row["job_id"] and source != Source.UNIX:
        return source, row["job_id"]
    return Source.UNIX, f"{row['pid']}@{row['pid_start']}"


def _records_seen(cluster: Cluster, since: datetime, now: datetime) -> dict:
    """The pods, containers and processes with records since `since`: by job key, their
    GPUs, first and last window, user and account (one aggregate query)."""
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
    return jobs


def process_jobs_collect(*, cluster: Cluster, since: datetime, now: datetime) -> int:
    """Jobs for the pods, containers and bare processes seen on the cluster's GPUs since
    `since` (Slurm's processes are its jobs'); a known running one not seen since ends once
    `report_settle_s` has passed its last record (`last_seen_at`), so `since` may be the
    last pass's mark. Returns how many were written."""
    jobs = _records_seen(cluster, since, now)
    known_rows = list(Job.objects.filter(cluster=cluster).filter(
        Q(source__in={s for s, _ in jobs}, job_id__in={j for _, j in jobs})
        | Q(source__in=PROCESS_SOURCES, reported_at__isnull=True, ended_at__isnull=True))
        .order_by("-started_at", "-pk"))
    earliest: dict[tuple[str, str], Job] = {}  # the latest unreported job of each id
    for job in known_rows:
        if job.reported_at is None:
            earliest.setdefault((job.source, job.job_id), job)
    settle = timedelta(seconds=conf.report_settle_s())
    for key, job in earliest.items():  # running, not seen since: as far as it was seen
        if key not in jobs and job.ended_at is None and job.last_seen_at is not None \
                and now - job.last_seen_at >= settle:
            jobs[key] = {"gpus": set(), "first": job.started_at, "last": job.last_seen_at,
                         "user": job.user_name, "account": job.account}
    if not jobs:
        return 0
    held = defaultdict(set)
    for job_pk, gpu_id in JobGpu.objects.filter(
            job__in=[j.pk for j in earliest.values()]).values_list("job_id", "gpu_id"):
        held[job_pk].add(gpu_id)
    resolver = OwnerResolver(cluster_ids={cluster.pk}, end=now, start=min(
        [since, *(j.started_at for j in earliest.values())]))
    owners = Owners(cluster.pk, {seen["user"] for seen in jobs.values()})
    upserts, moved = [], []
    for (source, job_id), seen in jobs.items():
        earlier = earliest.get((source, job_id))
        start = min(seen["first"], earlier.started_at) if earlier else seen["first"]
        if earlier:
            seen["gpus"] |= held[earlier.pk]
            seen["last"] = max(filter(None, [seen["last"], earlier.last_seen_at]))
            if earlier.started_at != start:
                earlier.started_at = start
                moved.append(earlier)
        ended = seen["last"] if now - seen["last"] >= settle else None
        record_source = "kubernetes" if source == Source.KUBERNETES else source
        upserts.append(_Upsert(source, job_id, start, {
            "ended_at": ended, "state": "ENDED" if ended else "RUNNING",
            "user_name": seen["user"], "account": seen["account"],
            "interactive": False, "last_seen_at": seen["last"],
            "owner_id": owners.at(seen["user"], start),
            "team_id": resolver.team_id(cluster_id=cluster.pk, job_source=record_source,
                                        job_account=seen["account"], user=seen["user"],
                                        uid=None, at_s=int(start.timestamp()))}, seen["gpus"]))
    known = {(j.source, j.job_id, j.started_at): j for j in known_rows}
    return _jobs_write(cluster, upserts, known, moved)
