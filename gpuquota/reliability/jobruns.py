"""The Slurm jobs that ran on the fleet's GPUs, as the reliability figures and the lemon test
read them (docs/reliability.md#jobs-that-failed-on-it): each run with the GPUs slurmctld
said it held (`SlurmJobGpu`), its span up to `as_of` and its state once it had ended by
then, so any past instant replays. From them: the jobs a hardware failure ended (the
evidence and the figures' jobs killed) and the jobs that failed with no hardware failure
behind them (`FAILED` or `NODE_FAIL`: counted by the lemon test against its class's rate
per job-day, so that the users' own failures, which every GPU sees, explain nothing)."""

import bisect
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection

from gpuquota.inventory.models import Gpu
from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu

#: States of a run that ended unfinished (a failure may have ended it).
UNFINISHED = ("NODE_FAIL", "FAILED", "CANCELLED", "PREEMPTED", "REQUEUED", "TIMEOUT")
#: A Kubernetes pod's run that a node's or device's trouble ended (`podruns`).
POD_KILLED = "POD_KILLED"
#: States of a run that failed (not cancelled, preempted or out of time): the user's
#: program's exit code, or the node's (NODE_FAIL, a pod killed).
FAILED = ("FAILED", "NODE_FAIL", POD_KILLED)


@dataclass
class JobRun:
    job_id: str
    gpu_ids: frozenset  # physical GPUs
    started_s: float  # seconds since the epoch
    ended_s: float | None  # None: running at as_of
    state: str  # "" while running at as_of
    gpus: int  # the GPUs its accounting says it was allocated

    @property
    def ended_at(self) -> datetime | None:
        return None if self.ended_s is None else datetime.fromtimestamp(self.ended_s, tz=UTC)

    def failure_hit(self, failures_of: dict[int, list], gap_s: float) -> int | None:
        """The first of its GPUs whose hardware failure (`failures_of`: each GPU's failure
        instants in seconds since the epoch) ended it (within `gap_s` before its end)."""
        return next((g for g in sorted(self.gpu_ids) for at in failures_of.get(g, ())
                     if self.started_s <= at <= self.ended_s and self.ended_s - at <= gap_s),
                    None)


_RUNS_SQL = """
SELECT job.cluster_id, job.job_id, EXTRACT(EPOCH FROM job.started_at)::float8,
       EXTRACT(EPOCH FROM job.ended_at)::float8, job.state, job.gpus,
       COALESCE(gpu.parent_id, gpu.id)
FROM {held} held
JOIN {job} job ON job.cluster_id = held.cluster_id AND job.job_id = held.job_id
JOIN {gpu} gpu ON gpu.id = held.gpu_id
WHERE held.first_seen_at <= %(as_of)s AND job.started_at <= %(as_of)s
  AND held.first_seen_at <= LEAST(COALESCE(job.ended_at, %(as_of)s), %(as_of)s)
  AND held.last_seen_at >= job.started_at
  AND (%(since)s::timestamptz IS NULL OR (held.last_seen_at >= %(since)s
       AND (job.ended_at IS NULL OR job.ended_at >= %(since)s)))
"""


def _runs_rows_portable(*, since: datetime | None, as_of: datetime) -> list[tuple]:
    """`_RUNS_SQL`'s rows without PostgreSQL's functions: three plain reads joined in Python
    (the embedded default's fleets are small)."""
    held = SlurmJobGpu.objects.filter(first_seen_at__lte=as_of)
    if since is not None:
        held = held.filter(last_seen_at__gte=since)
    held = list(held.values_list("cluster_id", "job_id", "gpu_id", "first_seen_at",
                                 "last_seen_at"))
    jobs = {(c, j): rest for c, j, *rest in SlurmJob.objects.filter(
        started_at__lte=as_of, cluster_id__in={h[0] for h in held},
        job_id__in={h[1] for h in held}).values_list(
        "cluster_id", "job_id", "started_at", "ended_at", "state", "gpus")}
    physical = {pk: parent or pk for pk, parent in Gpu.objects.filter(
        id__in={h[2] for h in held}).values_list("id", "parent_id")}
    rows = []
    for cluster_id, job_id, gpu_id, first_seen, last_seen in held:
        if (job := jobs.get((cluster_id, job_id))) is None:
            continue
        started, ended, state, count = job
        if first_seen > min(ended or as_of, as_of) or last_seen < started or (
                since is not None and ended is not None and ended < since):
            continue
        rows.append((cluster_id, job_id, started.timestamp(),
                     None if ended is None else ended.timestamp(), state, count,
                     physical[gpu_id]))
    return rows


def job_runs(gpus: dict, *, since: datetime | None, as_of: datetime) -> list[JobRun]:
    """The Slurm runs that started by `as_of` and ran after `since`, on GPUs of `gpus`
    (physical GPU id -> anything), each with the GPUs it was seen holding while it ran
    (one query: a fleet's half year of jobs is read every time the detector runs)."""
    if connection.vendor == "postgresql":
        sql = _RUNS_SQL.format(held=SlurmJobGpu._meta.db_table, job=SlurmJob._meta.db_table,
                               gpu=Gpu._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(sql, {"as_of": as_of, "since": since})
            rows = cursor.fetchall()
    else:  # the embedded default (SQLite): the same rows, joined here
        rows = _runs_rows_portable(since=since, as_of=as_of)
    as_of_s = as_of.timestamp()
    found: dict[tuple, JobRun] = {}
    for cluster_id, job_id, started, ended, state, count, gpu_id in rows:
        if gpu_id not in gpus:
            continue
        run = found.get((cluster_id, job_id, started))
        if run is None:
            if ended is not None and ended > as_of_s:
                ended, state = None, ""
            run = found[cluster_id, job_id, started] = JobRun(
                job_id, frozenset(), started, ended, state, count)
        run.gpu_ids = run.gpu_ids | {gpu_id}
    return list(found.values())


@dataclass
class KilledJob:
    """A scheduler job a failure ended: Slurm's NODE_FAIL, or a job that ended unfinished
    within `INCIDENT_GAP` after a hardware failure on a GPU it held; a pod the cluster
    ended for a node's trouble (`PodKilled`: evicted, or deleted for a NoExecute taint)."""

    gpu_id: int
    job_id: str
    ended_at: datetime
    gpu_hours: float  # the run's GPU-hours, lost with it (no checkpoint assumed)


def killed_jobs(runs: list[JobRun], failures_of: dict[int, list], *,
                gap_s: float) -> list[KilledJob]:
    """The runs a failure ended (`failures_of`: each GPU's hardware failure instants, in
    seconds since the epoch)."""
    killed = []
    for run in runs:
        if run.ended_s is None or run.state not in UNFINISHED:
            continue
        hit = run.failure_hit(failures_of, gap_s)
        if hit is not None or run.state == "NODE_FAIL":
            hours = run.gpus * (run.ended_s - run.started_s) / 3600
            killed.append(KilledJob(min(run.gpu_ids) if hit is None else hit, run.job_id,
                                    run.ended_at, hours))
    return killed


class Busy:
    """The job-days of a set of runs within any [start, end]: the integral of the number
    of runs going on, from its breakpoints (one bisection a window)."""

    def __init__(self, spans: list[tuple[float, float]]):
        self.spans = spans  # (start, end) in seconds since the epoch
        steps: dict[float, int] = defaultdict(int)
        for start, end in spans:
            steps[start] += 1
            steps[end] -= 1
        self._times, self._area, self._running = [], [], []
        area, running, last = 0.0, 0, None
        for t in sorted(steps):
            if last is not None:
                area += running * (t - last)
            running += steps[t]
            self._times.append(t)
            self._area.append(area)
            self._running.append(running)
            last = t

    def _at(self, t: float) -> float:
        i = bisect.bisect_right(self._times, t) - 1
        return 0.0 if i < 0 else self._area[i] + self._running[i] * (t - self._times[i])

    def days(self, start: datetime, end: datetime) -> float:
        return (self._at(end.timestamp()) - self._at(start.timestamp())) / 86400
