"""A workload from published cluster-trace studies, on 32 GPUs (4 nodes of 8) reserved by
four teams for the whole run, as the virtual clusters of Microsoft's Philly (Jeon et al.,
"Analysis of large-scale multi-tenant GPU clusters for DNN training workloads", USENIX ATC
2019) and SenseTime's Helios (Hu et al., "Characterization and prediction of deep learning
workloads in large-scale GPU datacenters", SC 2021) hold quotas of 4-12 GPUs:

- jobs arrive per team as a Poisson process with the diurnal and weekly cycle both studies
  report (submissions x1.6 on weekday working hours, x0.5 at night, x0.6 at weekends);
- most jobs are single-GPU, most GPU time is in multi-GPU jobs: 1, 2, 4, 8 GPUs with
  probability 0.6, 0.1, 0.15, 0.15 (at most the team's GPUs);
- run times are heavy-tailed: log-normal, median 30 minutes, sigma 1.8, capped at 3 days;
- about 30 % of jobs end unsuccessfully (Philly: 30.7 % failed or killed), most of them
  early: they run 2-10 % of their length;
- a running job's GPU utilization is spread around Philly's median of about 50 %
  (uniform 30-95 %);
- arrival rates aim at 45 % of a team's GPU time; jobs start first come, first served on
  the team's lowest free GPUs and wait when there are not enough, so 30-40 % is run (seed
  7, 14 days: 29-39 % per team), the 25-30 % surveys report.
"""

import math
import random

from bench.workloads import DAY, HOUR, Backlog, ReservationPlan, Run, Workload

TEAM_GPUS = (12, 8, 8, 4)
GPU_COUNTS, GPU_WEIGHTS = (1, 2, 4, 8), (0.6, 0.1, 0.15, 0.15)
MEDIAN_S, SIGMA, CAP_S = 30 * 60, 1.8, 3 * DAY
TARGET_BUSY = 0.45


def _rate_factor(t: int) -> float:
    day, hour = (t // DAY) % 7, (t % DAY) // HOUR
    factor = 1.6 if 9 <= hour < 18 else (0.5 if hour < 7 or hour >= 22 else 1.0)
    return factor * (0.6 if day >= 5 else 1.0)


def _jobs(rng: random.Random, gpus: int, horizon_s: int) -> list[tuple[int, int, int, float]]:
    """(arrival, GPUs, run time, util) of one team's jobs."""
    counts = [c for c in GPU_COUNTS if c <= gpus]
    weights = GPU_WEIGHTS[:len(counts)]
    mean_gpus = sum(c * w for c, w in zip(counts, weights, strict=True)) / sum(weights)
    mean_s = min(CAP_S, MEDIAN_S * math.exp(SIGMA**2 / 2)) * 0.8
    rate = TARGET_BUSY * gpus / (mean_gpus * mean_s)  # jobs per second at factor 1
    jobs, t = [], 0.0
    while t < horizon_s:
        t += rng.expovariate(rate * 1.6)
        if rng.random() > _rate_factor(int(t)) / 1.6:  # thinning: the daily cycle
            continue
        length = min(CAP_S, int(rng.lognormvariate(math.log(MEDIAN_S), SIGMA)))
        if rng.random() < 0.3:
            length = int(length * rng.uniform(0.02, 0.1))
        jobs.append((int(t), rng.choices(counts, weights)[0], max(60, length),
                     rng.uniform(30, 95)))
    return jobs


def _place(jobs, gpus: int, horizon_s: int) -> list[list[Run]]:
    """First come, first served on the lowest free GPUs; a job waits for enough of them."""
    runs: list[list[Run]] = [[] for _ in range(gpus)]
    free_at = [0] * gpus
    for arrival, count, length, util in jobs:
        start = arrival
        while True:
            free = [k for k in range(gpus) if free_at[k] <= start]
            if len(free) >= count:
                break
            start = min(f for f in free_at if f > start)
        start = (start // 60) * 60
        if start >= horizon_s:
            break
        for k in free[:count]:
            end = min(horizon_s, start + length)
            runs[k].append(Run(start, end, util))
            free_at[k] = start + length + 60
    return runs


def workload(*, days: int, seed: int) -> Workload:
    rng, horizon = random.Random(seed), days * DAY
    reservations = [
        ReservationPlan(team=i, count=gpus, start_h=0, hours=days * 24, kind="virtual-cluster",
                        runs=_place(_jobs(rng, gpus, horizon), gpus, horizon))
        for i, gpus in enumerate(TEAM_GPUS)]
    return Workload(name="traces", nodes=4, gpus_per_node=8, teams=len(TEAM_GPUS),
                    reservations=reservations,
                    backlog=Backlog(job_hours=(0.5, 8.0), checkpoint_s=(600, 1200, 1800)))
