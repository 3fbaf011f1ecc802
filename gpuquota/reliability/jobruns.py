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
from datetime import datetime, timedelta

from django.db.models import Q

from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu

#: States of a run that ended unfinished (a failure may have ended it).
UNFINISHED = ("NODE_FAIL", "FAILED", "CANCELLED", "PREEMPTED", "REQUEUED", "TIMEOUT")
#: States of a run that failed (not cancelled, preempted or out of time): the user's
#: program's exit code, or the node's (NODE_FAIL).
FAILED = ("FAILED", "NODE_FAIL")


@dataclass
class JobRun:
    job_id: str
    gpu_ids: frozenset  # physical GPUs
    started_at: datetime
    ended_at: datetime | None  # None: running at as_of
    state: str  # "" while running at as_of
    gpus: int  # the GPUs its accounting says it was allocated

    def failure_hit(self, failures_of: dict[int, list], gap: timedelta) -> int | None:
        """The first of its GPUs whose hardware failure ended it (within `gap` before its
        end), if any."""
        return next((g for g in sorted(self.gpu_ids) for at in failures_of.get(g, ())
                     if self.started_at <= at <= self.ended_at and self.ended_at - at <= gap),
                    None)


def job_runs(gpus: dict, *, since: datetime | None, as_of: datetime) -> list[JobRun]:
    """The Slurm runs that started by `as_of` and ran after `since`, on GPUs of `gpus`
    (physical GPU id -> anything), each with the GPUs it was seen holding."""
    held = SlurmJobGpu.objects.filter(gpu__isnull=False, first_seen_at__lte=as_of)
    runs = SlurmJob.objects.filter(started_at__isnull=False, started_at__lte=as_of)
    if since is not None:
        held = held.filter(last_seen_at__gte=since)
        runs = runs.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
    seen: dict[tuple, list] = defaultdict(list)
    for cluster_id, job_id, gpu_id, parent_id, first, last in held.values_list(
            "cluster_id", "job_id", "gpu_id", "gpu__parent_id", "first_seen_at",
            "last_seen_at"):
        if (parent_id or gpu_id) in gpus:
            seen[cluster_id, job_id].append((parent_id or gpu_id, first, last))
    if not seen:
        return []
    found = []
    for cluster_id, job_id, started, ended, state, count in runs.values_list(
            "cluster_id", "job_id", "started_at", "ended_at", "state", "gpus"):
        rows = seen.get((cluster_id, job_id))
        if not rows:
            continue
        if ended is not None and ended > as_of:
            ended, state = None, ""
        ids = frozenset(g for g, first, last in rows
                        if first <= (ended or as_of) and last >= started)
        if ids:
            found.append(JobRun(job_id, ids, started, ended, state, count))
    return found


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
                gap: timedelta) -> list[KilledJob]:
    """The runs a failure ended (`failures_of`: each GPU's hardware failure instants)."""
    killed = []
    for run in runs:
        if run.ended_at is None or run.state not in UNFINISHED:
            continue
        hit = run.failure_hit(failures_of, gap)
        if hit is not None or run.state == "NODE_FAIL":
            hours = run.gpus * (run.ended_at - run.started_at).total_seconds() / 3600
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
