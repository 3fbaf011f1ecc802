"""What any lemon test could find on the reliability benchmark's fleet at one false flag a
fleet-day (docs/benchmarks.md#reliability): an upper bound, for the recall goal.

The oracle knows what the detector must estimate: each class's true rates of incidents
(failures and hardware warnings) and of failed jobs with no hardware event (users'
failures and silent kills), the planted multiples (10x, 20x, 40x, equally likely) and how
many lemons a class holds. A GPU's two counts over 180 days are independent Poisson under
both hypotheses, so by the Neyman-Pearson lemma the most powerful test flags the (incidents,
failed jobs) cells of the highest likelihood ratio, in every class together, until the
healthy GPUs expected in them reach the budget (the last cell in part: randomized). Its
expected recall of the GPU lemons is the bound; the detector must also estimate the rates,
test the nodes and hold the budget on every day from day 90, so it cannot reach it.

    .venv/bin/python -m bench.reliability_oracle [--budget 1] [--users-failed 14.6]

Assumed as the generator plants them (bench/reliability_fleet.py, reliability_jobs.py):
warnings at 1 per 1,000 GPU-days, a lemon's at its multiple; the H100 class's rate doubled
for the last 60 days (its lemons' not); silent kills at twice a GPU's failure rate (before
the drift), its jobs running all the time; `--users-failed`: the users' failed jobs a GPU
sees in 180 days (the benchmark's jobs_expected less the healthy silent kills: about
14.6)."""

import argparse
import math

from bench.reliability_fleet import (
    CLASSES,
    DRIFT_CLASS,
    DRIFT_DAY,
    GPUS_PER_NODE,
    LEMON_MULTIPLES,
    LEMONS_PER_MULTIPLE,
    WARNING_RATE,
)
from bench.reliability_jobs import SILENT_KILLS_PER_FAILURE

DAYS = 180
MAX_COUNT = 120


def _pmf(mu: float) -> list[float]:
    return [math.exp(k * math.log(mu) - mu - math.lgamma(k + 1)) for k in range(MAX_COUNT)]


def _means(rate: float, multiple: int, drift: bool, users: float) -> tuple[float, float]:
    """(incidents, failed jobs) expected of a GPU in 180 days."""
    failures = rate * multiple * DAYS
    silent = SILENT_KILLS_PER_FAILURE * failures  # at the class's rate before its drift
    if drift and multiple == 1:
        failures += rate * (DAYS - DRIFT_DAY)  # the class's rate doubled from DRIFT_DAY
    return failures + WARNING_RATE * multiple * DAYS, users + silent


def cells(users: float, *, jobs: bool = True) -> list[tuple[float, float, float]]:
    """(likelihood ratio, healthy GPUs expected, lemons expected) per class and cell of
    (incidents, failed jobs); with no `jobs`, of incidents alone."""
    total = sum(nodes * GPUS_PER_NODE for *_, nodes in CLASSES)
    lemons = len(LEMON_MULTIPLES) * LEMONS_PER_MULTIPLE
    out = []
    for name, _model, per_1000, nodes in CLASSES:
        gpus, drift = nodes * GPUS_PER_NODE, name == DRIFT_CLASS
        lemons_here = lemons * gpus / total
        inc0, job0 = (_pmf(m) for m in _means(per_1000 / 1000, 1, drift, users))
        alts = [tuple(_pmf(m) for m in _means(per_1000 / 1000, k, drift, users))
                for k in LEMON_MULTIPLES]
        if not jobs:
            job0, alts = [1.0], [(inc, [1.0]) for inc, _ in alts]
        for n in range(MAX_COUNT):
            for j in range(len(job0)):
                null = inc0[n] * job0[j]
                alt = sum(a[0][n] * a[1][j] for a in alts) / len(alts)
                if alt > 0:
                    out.append((alt / null if null > 0 else math.inf, (gpus - lemons_here)
                                * null, lemons_here * alt))
    return out


def bound(budget: float, users: float, *, incidents_only: bool = False) -> float:
    """The expected share of the GPU lemons the most powerful test finds within `budget`
    false flags (`incidents_only`: the test of the incident counts alone)."""
    found, spent = 0.0, 0.0
    for _lr, false, hit in sorted(cells(users, jobs=not incidents_only),
                                  key=lambda c: -c[0]):
        if spent + false > budget:
            return (found + hit * (budget - spent) / false) / (len(LEMON_MULTIPLES)
                                                                 * LEMONS_PER_MULTIPLE)
        found, spent = found + hit, spent + false
    return found / (len(LEMON_MULTIPLES) * LEMONS_PER_MULTIPLE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--users-failed", type=float, default=14.6)
    args = parser.parse_args()
    both = bound(args.budget, args.users_failed)
    alone = bound(args.budget, args.users_failed, incidents_only=True)
    lemons = len(LEMON_MULTIPLES) * LEMONS_PER_MULTIPLE
    for label, share in (("incidents and failed jobs", both), ("incidents alone", alone)):
        # the 4 node lemons (5x on 8 GPUs) counted found: every seed's detector finds them
        print(f"oracle {label}: GPU lemons {100 * share:.1f} %, with the 4 node lemons "
              f"{100 * (share * lemons + 4) / (lemons + 4):.1f} % at {args.budget} false "
              f"flags a day")


if __name__ == "__main__":
    main()
