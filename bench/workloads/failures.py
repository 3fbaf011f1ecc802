"""The failure modes of issue 19, on 32 GPUs (4 nodes of 8), every GPU reserved for the
whole run by one of five teams:

- a team that works only on weekdays, 08:00-19:00 UTC (8 GPUs);
- 8-GPU training that fails 20-90 minutes in and is resubmitted after 3 hours to 3 days of
  debugging, two to four times, then runs for 1-3 days (8 GPUs);
- an inference service below the busy threshold (2-4 %) that still serves: its process
  is always there (4 GPUs);
- notebooks, a session of 2-4 h every 2-5 days; one session in three leaves its kernel
  holding memory at 0 % for a day (6 one-GPU reservations);
- hyper-parameter sweeps in waves: every 1-3 days, 6-12 h of 1-2 h trials on all 6 GPUs;
- node 3 failing for three days from day 4, 09:00.
"""

import random

from bench.workloads import (
    DAY,
    HOUR,
    Backlog,
    Failure,
    ReservationPlan,
    Run,
    Workload,
    runs_clip,
)


def _weekday(horizon_s: int) -> list[Run]:
    return [Run(d * DAY + 8 * HOUR, d * DAY + 19 * HOUR, 80.0)
            for d in range(horizon_s // DAY) if d % 7 < 5]


def _failing_training(rng: random.Random, horizon_s: int) -> list[Run]:
    runs, t = [], rng.randint(0, 6) * HOUR
    while t < horizon_s:
        for _ in range(rng.randint(2, 4)):
            runs.append(Run(t, t + rng.randint(20, 90) * 60, 95.0))
            t = runs[-1].end_s + rng.choice([3 * HOUR, 8 * HOUR, 20 * HOUR, 2 * DAY, 3 * DAY])
        runs.append(Run(t, t + rng.randint(1, 3) * DAY, 95.0))
        t = runs[-1].end_s + rng.randint(12, 48) * HOUR
    return runs_clip(runs, horizon_s)


def _notebook(rng: random.Random, horizon_s: int) -> list[Run]:
    runs, t = [], rng.randint(0, 48) * HOUR
    while t < horizon_s:
        end = t + rng.randint(2, 4) * HOUR
        runs.append(Run(t, end, 30.0, memory_gib=20))
        if rng.random() < 1 / 3:
            runs.append(Run(end, end + DAY, 0.0, memory_gib=20))
        t = end + rng.randint(2, 5) * DAY
    return runs_clip(runs, horizon_s)


def _sweeps(rng: random.Random, horizon_s: int, gpus: int) -> list[list[Run]]:
    runs: list[list[Run]] = [[] for _ in range(gpus)]
    t = rng.randint(0, 24) * HOUR
    while t < horizon_s:
        wave_end = t + rng.randint(6, 12) * HOUR
        for k in range(gpus):
            at = t + rng.randint(0, 10) * 60
            while at < wave_end:
                length = rng.randint(60, 120) * 60
                runs[k].append(Run(at, at + length, rng.uniform(60, 95)))
                at += length + rng.randint(1, 5) * 60
        t = wave_end + rng.randint(1, 3) * DAY
    return [runs_clip(r, horizon_s) for r in runs]


def workload(*, days: int, seed: int) -> Workload:
    rng, horizon = random.Random(seed), days * DAY
    hours = days * 24
    training = _failing_training(rng, horizon)
    reservations = [
        ReservationPlan(team=0, count=8, start_h=0, hours=hours, kind="weekday",
                        runs=[_weekday(horizon)] * 8),
        ReservationPlan(team=1, count=8, start_h=0, hours=hours, kind="failing-training",
                        runs=[training] * 8),
        ReservationPlan(team=2, count=4, start_h=0, hours=hours, kind="inference",
                        runs=[[Run(0, horizon, rng.uniform(2, 4), memory_gib=16)]
                              for _ in range(4)]),
        ReservationPlan(team=4, count=6, start_h=0, hours=hours, kind="sweeps",
                        runs=_sweeps(rng, horizon, 6)),
    ]
    for _ in range(6):
        t = 0
        while t < hours:
            length = min(rng.randint(7, 10) * 24, hours - t)
            reservations.append(ReservationPlan(team=3, count=1, start_h=t, hours=length,
                                                kind="notebook",
                                                runs=[_notebook(rng, length * HOUR)]))
            t += length
    return Workload(name="failures", nodes=4, gpus_per_node=8, teams=5,
                    reservations=reservations,
                    failures=[Failure(4 * DAY + 9 * HOUR, 7 * DAY + 9 * HOUR, node=3)],
                    backlog=Backlog())
