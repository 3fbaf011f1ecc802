"""The reclaim simulation's workload (`bench.reclaim`): reservations of five kinds laid
back to back in lanes of GPUs, and the utilization of each of their GPUs per 10-minute
window, all from the seed."""

import random
from dataclasses import dataclass, field
from datetime import timedelta

WINDOW_S = 600
PER_HOUR = 3600 // WINDOW_S


@dataclass
class Plan:
    """One reservation of the workload: `pattern(k, w)` gives the util of its k-th GPU
    in window w (counted from the simulation's start), None for no data."""

    team: int
    count: int
    start_h: int
    hours: int
    kind: str
    params: dict = field(default_factory=dict)


def plans_generate(days: int, seed: int) -> list[Plan]:
    """Lanes of GPUs, each filled with back-to-back reservations of one kind."""
    rng = random.Random(seed)
    horizon = days * 24
    lanes = ([("training", 8)] * 3 + [("training", 4)] * 2 + [("steady", 4)]
             + [("notebook", 1)] * 12 + [("bursty", 2)] * 4 + [("diurnal", 1)] * 8)
    plans = []
    for lane, (kind, count) in enumerate(lanes):
        t = rng.randint(0, 36)
        while t < horizon - 24:
            hours = {"training": rng.randint(8 * 24, 16 * 24), "steady": horizon,
                     "notebook": rng.randint(5 * 24, 10 * 24), "bursty": 7 * 24,
                     "diurnal": 14 * 24}[kind]
            hours = min(hours, horizon + 48 - t)
            params = {"lane": lane}
            if kind == "training":
                params["busy_until_h"] = int(hours * rng.uniform(0.15, 0.45))
            elif kind == "notebook":
                params["active_h"] = rng.randint(2, 5)
                if rng.random() < 0.2:
                    params["back_at_h"] = rng.randint(48, max(49, hours - 6))
            elif kind == "bursty":
                params["seed"] = rng.randint(0, 10**9)
            plans.append(Plan(team=lane % 4, count=count, start_h=t, hours=hours, kind=kind,
                              params=params))
            t += hours + rng.randint(2, 30)
    return plans


def plan_util(plan: Plan, k: int, w: int) -> float | None:
    """The util (percent) of the plan's k-th GPU in its window w (from its start)."""
    h, p = w // PER_HOUR, plan.params
    if plan.kind == "training":
        return 95.0 if h < p["busy_until_h"] else 0.0
    if plan.kind == "steady":
        return 0.0 if w % 48 == 47 else 92.0
    if plan.kind == "notebook":
        if h < p["active_h"] or p.get("back_at_h", -99) <= h < p.get("back_at_h", -99) + 2:
            return 35.0
        return 0.0
    if plan.kind == "bursty":
        return 90.0 if _bursty_busy(p["seed"], k, w) else 0.0
    if plan.kind == "diurnal":
        at = plan.params["t0"] + timedelta(seconds=(plan.start_h * 3600 + w * WINDOW_S))
        busy = (9 <= at.hour < 18) if at.weekday() < 5 else (11 <= at.hour < 14)
        return 55.0 if busy else 1.0
    raise ValueError(plan.kind)


_BURSTS: dict = {}


def _bursty_busy(seed: int, k: int, w: int) -> bool:
    """Jobs of 1-3 h separated by idle gaps of 1-6 h; a job uses both GPUs 70 % of times."""
    if seed not in _BURSTS:
        rng, busy, t = random.Random(seed), [set(), set()], 0
        while t < 24 * 40 * PER_HOUR:
            t += rng.randint(1 * PER_HOUR, 6 * PER_HOUR)
            length = rng.randint(1 * PER_HOUR, 3 * PER_HOUR)
            gpus = (0, 1) if rng.random() < 0.7 else (rng.randint(0, 1),)
            for g in gpus:
                busy[g].update(range(t, t + length))
            t += length
        _BURSTS[seed] = busy
    return w in _BURSTS[seed][k]
