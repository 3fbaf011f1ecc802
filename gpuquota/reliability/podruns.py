"""The Kubernetes pods that ran on the fleet's GPUs, as the reliability figures and the lemon
test read them (docs/reliability.md#jobs-that-failed-on-it), beside the Slurm runs of
`jobruns`:

- the pods a node's or a device's trouble ended (`PodKilled`, kept by the Kubernetes
  backend: evicted, deleted for a NoExecute node or device taint), with the GPUs their
  processes ran on (the agents' records, by pod name and namespace) and their start (the
  first record): jobs killed, and failed jobs of the lemon test (state `POD_KILLED`);
- every other pod the jobs app collected from the same records (core's POD_RUNS: the jobs
  app sits above this one), with the GPUs it held: their job-days, the lemon test's
  exposure. Kubernetes keeps no
  exit state gpuquota reads, so such a pod never counts as failed.

Replayed at `as_of` like the Slurm runs: a pod still running then has not ended."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Min

from gpuquota.core.contributions import hooks_call
from gpuquota.ingest.models import ProcessRecord
from gpuquota.reliability.jobruns import POD_KILLED, JobRun, KilledJob
from gpuquota.schedulers.models import PodKilled

#: How far before its end a killed pod's process records are read for its GPUs and start.
POD_LOOKBACK = timedelta(days=7)
#: How long after a collected run's last record its pod may have been killed and still be
#: that run (records come every minute; the kill may come a little after the last).
KILL_SLACK = timedelta(minutes=10)


@dataclass
class PodsKilled:
    killed: list[KilledJob]  # GPU-hours from their first record
    runs: list[JobRun]  # on the GPUs their processes ran on
    ends: dict[tuple[int, str], list[datetime]]  # (cluster id, namespace/name) -> ends


def pods_killed(gpus: dict, *, since: datetime | None, as_of: datetime) -> PodsKilled:
    """The pods a node's or device's trouble ended in [since, as_of] on GPUs of `gpus`
    (physical GPU id -> anything)."""
    pods = PodKilled.objects.filter(ended_at__lte=as_of)
    if since is not None:
        pods = pods.filter(ended_at__gte=since)
    pods = list(pods.values("cluster_id", "namespace", "name", "ended_at"))
    found = PodsKilled([], [], defaultdict(list))
    if not pods:
        return found
    records = ProcessRecord.objects.filter(
        job_source="kubernetes", job_id__in={p["name"] for p in pods},
        window_start__gte=min(p["ended_at"] for p in pods) - POD_LOOKBACK,
        window_start__lte=max(p["ended_at"] for p in pods),
    ).values("gpu__node__cluster_id", "job_account", "job_id", "gpu_id", "gpu__parent_id",
             ).annotate(first=Min("window_start"))
    seen: dict[tuple, list] = defaultdict(list)
    for r in records.values_list("gpu__node__cluster_id", "job_account", "job_id", "gpu_id",
                                 "gpu__parent_id", "first"):
        seen[r[:3]].append(r[3:])
    for pod in pods:
        rows = [(parent or gpu_id, first) for gpu_id, parent, first in seen.get(
            (pod["cluster_id"], pod["namespace"], pod["name"]), ())
            if first <= pod["ended_at"] and (parent or gpu_id) in gpus]
        if not rows:
            continue
        held = frozenset(gpu_id for gpu_id, _ in rows)
        started, ended = min(first for _, first in rows), pod["ended_at"]
        job_id = f"{pod['namespace']}/{pod['name']}"
        found.killed.append(KilledJob(min(held), job_id, ended,
                                      len(held) * (ended - started).total_seconds() / 3600))
        found.runs.append(JobRun(job_id, held, started.timestamp(), ended.timestamp(),
                                 POD_KILLED, len(held)))
        found.ends[pod["cluster_id"], job_id].append(ended)
    return found


def _killed_run(killed_ends: list[datetime], started: datetime, ended: datetime | None) -> bool:
    """Whether a collected run is one of a killed pod's (its end within the run's span, or
    within the records' settling after it: the last record precedes the kill)."""
    return any(started <= at and (ended is None or at <= ended + KILL_SLACK)
               for at in killed_ends)


def pod_runs(gpus: dict, *, since: datetime | None, as_of: datetime,
             killed: dict[tuple[int, str], list[datetime]]) -> list[JobRun]:
    """The other pods (not those `killed` ended) that started by `as_of` and ran after
    `since` on GPUs of `gpus`, as the jobs app collected them (core's POD_RUNS)."""
    found: dict[tuple, JobRun] = {}
    as_of_s = as_of.timestamp()
    for rows in hooks_call("POD_RUNS", since=since, as_of=as_of):
        for cluster_id, namespace, name, started, ended, gpu_id in rows:
            job_id = f"{namespace}/{name}"
            if gpu_id not in gpus or _killed_run(killed.get((cluster_id, job_id), []),
                                                 started, ended):
                continue
            run = found.get((cluster_id, job_id, started))
            if run is None:
                ended_s = None if ended is None or ended.timestamp() > as_of_s \
                    else ended.timestamp()
                run = found[cluster_id, job_id, started] = JobRun(
                    job_id, frozenset(), started.timestamp(), ended_s,
                    "" if ended_s is None else "ENDED", 0)
            run.gpu_ids = run.gpu_ids | {gpu_id}
            run.gpus = len(run.gpu_ids)
    return list(found.values())
