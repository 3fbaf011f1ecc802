"""The jobs of the reliability benchmark's fleet (docs/benchmarks.md#reliability): every GPU
runs one-GPU Slurm jobs back to back, and they go through the paths production writes them
by: the accounting import's `slurm_jobs_record` (the jobs as `sacct --json` answers them)
and the running-jobs observation's `running_gpus_record` (the GPUs slurmctld says each
holds, polled on the hour: a job is seen at its start and at the last poll before its end).

A job's planned length is log-normal (median `MEDIAN_H` hours, sigma `SIGMA`), in whole
hours, cut at the time limit `LIMIT_H` (TIMEOUT). It ends early:

- FAILED at a uniformly drawn share of its length (squared: users' failures come early)
  with probability `USER_FAILED` on every GPU: the users' own reasons, that must flag no one;
- FAILED (or NODE_FAIL, one in `NODE_FAIL_SHARE`) a minute after a hardware failure of its
  GPU (the incident's: the detector counts it once, as the incident);
- FAILED or NODE_FAIL at a silent kill of its GPU: no XID at all. A GPU's silent kills come
  at `SILENT_KILLS_PER_FAILURE` times its own hardware failure rate (so a lemon's at its
  multiple, a healthy GPU's at its class's rate): an assumption, not a published figure.

Drawn from a random stream of their own (`jobs:<seed>`), so a seed's failures, warnings,
drift and application XIDs are those it gave before jobs ran."""

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

MEDIAN_H, SIGMA, LIMIT_H = 24.0, 1.0, 72
USER_FAILED = 0.10
SILENT_KILLS_PER_FAILURE = 2.0
NODE_FAIL_SHARE = 3
HOUR = 3600
USERS = 40


@dataclass
class BenchJob:
    node: int
    gpu: int
    start_s: int
    end_s: int | None  # None: still running at the end
    state: str
    user: str
    cause: str  # "done", "timeout", "user", "hardware", "silent", "running"


def _ceil_hour(at_s: float) -> int:
    return int(math.ceil(at_s / HOUR)) * HOUR


def gpu_jobs(rng: random.Random, node: int, gpu: int, *, days: int, failures_s: list,
             silent_per_day: float) -> list[BenchJob]:
    """One GPU's jobs over `days`, ended by its hardware failures (`failures_s`, sorted)
    and by silent kills at `silent_per_day`."""
    end_s = days * 86400
    silent, t = [], 0.0
    while silent_per_day > 0:
        t += rng.expovariate(silent_per_day) * 86400
        if t >= end_s:
            break
        silent.append(int(t))
    kills = sorted([(s, "hardware") for s in failures_s] + [(s, "silent") for s in silent])
    jobs, start, k = [], 0, 0
    while start < end_s:
        planned_h = max(1, math.ceil(rng.lognormvariate(math.log(MEDIAN_H), SIGMA)))
        user = f"u{rng.randrange(USERS)}"
        end, state, cause = start + min(planned_h, LIMIT_H) * HOUR, "COMPLETED", "done"
        if planned_h > LIMIT_H:
            state, cause = "TIMEOUT", "timeout"
        if rng.random() < USER_FAILED:
            end = start + max(60, int(rng.random() ** 2 * (end - start)))
            state, cause = "FAILED", "user"
        while k < len(kills) and kills[k][0] < start:
            k += 1  # a kill between jobs: the GPU was idle
        node_fail = rng.randrange(NODE_FAIL_SHARE) == 0
        if k < len(kills) and kills[k][0] < end:
            end, cause = kills[k][0] + 60, kills[k][1]
            state = "NODE_FAIL" if node_fail else "FAILED"
        if end >= end_s:
            jobs.append(BenchJob(node, gpu, start, None, "RUNNING", user, "running"))
            break
        jobs.append(BenchJob(node, gpu, start, end, state, user, cause))
        start = _ceil_hour(end)
    return jobs


def fleet_jobs(work, *, seed: int, rate_of: dict, multiple_of: dict) -> list[BenchJob]:
    """Every GPU's jobs (`multiple_of`: (node, gpu) -> its failure multiple)."""
    rng = random.Random(f"jobs:{seed}")
    failures = defaultdict(list)
    for e in work.events:
        if e.critical:
            failures[e.node, e.gpu].append(e.at_s)
    jobs = []
    for node, (_host, klass) in enumerate(work.nodes):
        for gpu in range(8):
            silent = SILENT_KILLS_PER_FAILURE * rate_of[klass] * multiple_of.get((node, gpu), 1)
            jobs += gpu_jobs(rng, node, gpu, days=work.days,
                             failures_s=sorted(failures[node, gpu]), silent_per_day=silent)
    return jobs


def _sacct(job_id: int, job: BenchJob, hostname: str, t0: datetime) -> dict:
    start = int(t0.timestamp()) + job.start_s
    return {"job_id": job_id, "state": {"current": [job.state]},
            "time": {"submission": start - 30, "start": start,
                     "end": 0 if job.end_s is None else int(t0.timestamp()) + job.end_s,
                     "limit": {"set": True, "infinite": False, "number": LIMIT_H * 60}},
            "account": "bench", "user": job.user, "partition": "gpu", "qos": "normal",
            "nodes": hostname, "tres": {"allocated": [{"type": "gres", "name": "gpu",
                                                       "count": 1}]}}


def jobs_ingest(cluster, work, t0: datetime, chunk: int = 20000) -> int:
    """The jobs through the accounting import's and the running observation's services."""
    from gpuquota.schedulers.slurm.jobs import slurm_jobs_record
    from gpuquota.schedulers.slurm.objects import RunningGpu
    from gpuquota.schedulers.slurm.running import running_gpus_record

    jobs = work.jobs
    for first in range(0, len(jobs), chunk):
        slurm_jobs_record(cluster=cluster, jobs=[
            _sacct(first + i + 1, job, work.nodes[job.node][0], t0)
            for i, job in enumerate(jobs[first:first + chunk])])
    polls = defaultdict(list)
    for i, job in enumerate(jobs):
        seen = RunningGpu(str(i + 1), "bench", job.user, work.nodes[job.node][0], job.gpu)
        polls[job.start_s].append(seen)
        last = (job.end_s - 1) // HOUR * HOUR if job.end_s is not None else None
        if last is not None and last > job.start_s:
            polls[last].append(seen)
    for at_s in sorted(polls):
        running_gpus_record(cluster=cluster, gpus=polls[at_s],
                            at=t0 + timedelta(seconds=at_s), node_name=lambda h: h)
    return len(polls)

