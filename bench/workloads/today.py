"""Today's workload: the reclaim simulation's (bench/reclaim_workload.py, unchanged) on its
64 GPUs: long training reservations whose job ends after 15-45 % of the window, a steady
4-GPU reservation (one GPU failing on day 12, or at 85 % of a shorter run), notebooks that
hold memory at 0 % for days (a kernel alive: a process), bursty job pairs, diurnal
interactive use (holding memory off-hours). Its 10-minute utilization becomes one-minute
runs: memory held means a process is there, as in that simulation."""

from datetime import UTC, datetime

from bench.reclaim_workload import PER_HOUR, WINDOW_S, plan_util, plans_generate
from bench.workloads import DAY, Failure, ReservationPlan, Run, Workload

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)


def _runs(plan, k: int) -> list[Run]:
    runs, current = [], None
    for w in range(plan.hours * PER_HOUR):
        util = plan_util(plan, k, w)
        held = util is not None and (plan.kind == "notebook" or util > 0)
        key = (util, held) if held else None
        if current is not None and current[0] == key:
            current[2] = (w + 1) * WINDOW_S
            continue
        if current is not None and current[0] is not None:
            runs.append(Run(current[1], current[2], current[0][0]))
        current = [key, w * WINDOW_S, (w + 1) * WINDOW_S]
    if current is not None and current[0] is not None:
        runs.append(Run(current[1], current[2], current[0][0]))
    return runs


def workload(*, days: int, seed: int) -> Workload:
    plans = plans_generate(days, seed)
    reservations = []
    for plan in plans:
        plan.params["t0"] = MONDAY
        reservations.append(ReservationPlan(
            team=plan.team, count=plan.count, start_h=plan.start_h, hours=plan.hours,
            kind=plan.kind, runs=[_runs(plan, k) for k in range(plan.count)]))
    steady = next(i for i, p in enumerate(plans) if p.kind == "steady")
    fail_s = min(12 * DAY, int(days * DAY * 0.85))
    return Workload(name="today", nodes=8, gpus_per_node=8, teams=4,
                    reservations=reservations,
                    failures=[Failure(fail_s, days * DAY + DAY, reservation=steady, gpu=1)])
