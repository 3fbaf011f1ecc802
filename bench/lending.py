"""Lending simulation: a workload's fleet on a fake clock at one-minute resolution,
through the product's services on PostgreSQL (reservations, ingestion, the rollup sweep,
reclaim, the lending scan and loan services), under each policy: `none`, `reclaim` (hard
reclaim, hourly, every recommendation accepted), `lending` (idle reserved GPUs lent to a
standing backlog of preemptible borrower work, returned when their owner's job comes),
`both`.

    .venv/bin/python -m bench.lending [--workload bench.workloads.failures:workload ...]
        [--policy none --policy lending ...] [--days 14] [--seed 7]
        [--lend-after-idle-s 1800] [--batch-s 600] [--reconcile-s 60] [--db-tag _x]

The reclaim policy is the one in force (`RECLAIM_*` in the environment, e.g.
`RECLAIM_RULE=guarded`); the DETAIL line names its rule.

Each run gets its own database (gq_lendsim_<workload>_<policy><tag>, dropped first) and
prints one line a script can read:

    RESULT workload=<name> policy=<name> fleet_busy=<percent> owner_lost_gpu_h=<n>
        return_p99_s=<n> borrower_lost_share=<percent> false_reclaim_share=<percent>
        return_model=<soak|modelled> modelled=<what is modelled, not measured>

then a DETAIL line (JSON) with the rest: p50/p95, GPU-hours lent, owner waiting, timings.
Fleet busy = busy GPU-seconds in the product's own rollups (every busy second once, whoever
ran it, failed seconds excluded) / installed GPU-seconds. Owner lost = GPU-hours in which
the owner would have computed (a workload run above 0 %: a job, a service under the busy
threshold; not a kernel holding memory at 0 %) on a GPU reclaim had taken. Time-to-return = a loan's
`freed_at - returned_at` for the returns asked by an owner's job: with `--stop-model soak`
(the default) the owner's wait is drawn from the soak on real Slurm daemons
(bench/lending_calibration.py) and the loan ended by the product's observation of
slurmctld; with `modelled`, the reconcile tick plus the borrower's stop. Borrower lost = work since
the last checkpoint at each preemption / GPU-hours lent. False reclaim share as in
bench/reclaim.py: GPU-hours released from GPUs whose owner came back before the reservation's
end / all GPU-hours released.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.simdb import django_on_fresh_database

WORKLOADS = ("bench.workloads.today:workload", "bench.workloads.failures:workload",
             "bench.workloads.traces:workload")


def workload_load(spec: str, *, days: int, seed: int):
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function or "workload")(days=days, seed=seed)


def sim_start(days: int) -> datetime:
    """00:00 UTC on the Monday at least `days` + 7 days before now (so nothing simulated is
    in the future and a week starts on day 0)."""
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    day -= timedelta(days=days + 7)
    return day - timedelta(days=day.weekday())


def owner_minutes(fleet, workload, minutes: int, t0: datetime) -> dict:
    """GPU id -> per minute: (the owner's Run or None, assignment id, team) while booked."""
    from gpuquota.reservations.models import Assignment

    owner = {g.id: [None] * (minutes + 1) for g in fleet.gpus}
    ids = {(a[0], a[1]): a[2] for a in Assignment.objects.values_list(
        "reservation_id", "gpu_id", "id")}
    for b in fleet.booked:
        plan = workload.reservations[b.plan_index]
        m0 = int((b.start - t0).total_seconds()) // 60
        span = range(max(0, m0), min(minutes + 1, m0 + plan.hours * 60))
        for k, gpu_id in enumerate(b.gpu_ids):
            slots = owner[gpu_id]
            idle = (None, ids[(b.reservation_id, gpu_id)], plan.team)
            for m in span:
                slots[m] = idle
            for run in plan.runs[k] if k < len(plan.runs) else ():
                busy = (run, idle[1], plan.team)
                for m in range(max(span.start, m0 + run.start_s // 60),
                               min(span.stop, m0 + run.end_s // 60)):
                    slots[m] = busy
    return owner


def failure_minutes(fleet, workload, t0: datetime, minutes: int) -> dict:
    out: dict[int, list] = {}
    per_node = workload.gpus_per_node
    booked = {b.plan_index: b for b in fleet.booked}
    for f in workload.failures:
        if f.node is not None:
            gpus = [g.id for g in fleet.gpus[f.node * per_node:(f.node + 1) * per_node]]
        elif f.reservation in booked:
            gpus = [booked[f.reservation].gpu_ids[f.gpu]]
        else:
            continue
        for gpu_id in gpus:
            out.setdefault(gpu_id, []).append((f.start_s // 60, min(minutes, f.end_s // 60)))
    return out


def simulate(*, spec: str, policy: str, days: int, seed: int, lend_after_idle_s: int,
             batch_s: int, reconcile_s: int, stop_model: str = "soak") -> dict:
    """One run on the current database; returns its figures."""
    began = time.monotonic()
    previous = os.environ.get("LEND_AFTER_IDLE_S")
    os.environ["LEND_AFTER_IDLE_S"] = str(lend_after_idle_s)  # read by gpuquota.lending.conf
    try:
        result = _simulate(spec=spec, policy=policy, days=days, seed=seed,
                           reconcile_s=reconcile_s, batch_s=batch_s, stop_model=stop_model,
                           lend_after_idle_s=lend_after_idle_s, began=began)
    finally:
        if previous is None:
            os.environ.pop("LEND_AFTER_IDLE_S")
        else:
            os.environ["LEND_AFTER_IDLE_S"] = previous
    return result


def _simulate(*, spec: str, policy: str, days: int, seed: int, lend_after_idle_s: int,
              batch_s: int, reconcile_s: int, began: float, stop_model: str) -> dict:
    from bench.lending_figures import figures
    from bench.lending_fleet import fleet_build, reservations_book
    from bench.lending_sim import Clock
    from gpuquota.ingest.partitions import partitions_ensure

    workload = workload_load(spec, days=days, seed=seed)
    t0, minutes = sim_start(days), days * 1440
    partitions_ensure(days={(t0 + timedelta(days=d)).date() for d in range(-1, days + 2)})
    fleet = fleet_build(workload, t0=t0)
    reservations_book(fleet, workload, t0=t0)
    clock = Clock(workload=workload, fleet=fleet, policy=policy, t0=t0, days=days,
                  batch_s=batch_s, reconcile_s=reconcile_s, seed=seed,
                  owner=owner_minutes(fleet, workload, minutes, t0),
                  failures=failure_minutes(fleet, workload, t0, minutes),
                  stop_model=stop_model)
    setup_s = time.monotonic() - began
    clock.run()
    result = figures(clock, workload=workload, policy=policy)
    result["timings_s"] = {"setup": round(setup_s, 1),
                           "run": round(time.monotonic() - began - setup_s, 1)}
    result["stop_model"] = stop_model
    result["settings"] = {"days": days, "seed": seed, "lend_after_idle_s": lend_after_idle_s,
                          "batch_s": batch_s, "reconcile_s": reconcile_s,
                          "reclaim_rule": os.environ.get("RECLAIM_RULE") or "guarded"}
    return result


def result_line(r: dict) -> str:
    return (f"RESULT workload={r['workload']} policy={r['policy']} "
            f"fleet_busy={r['fleet_busy'] * 100:.1f} owner_lost_gpu_h={r['owner_lost_gpu_h']:.1f} "
            f"return_p99_s={r['return_p99_s']} "
            f"borrower_lost_share={r['borrower_lost_share'] * 100:.1f} "
            f"false_reclaim_share={r['false_reclaim_share'] * 100:.1f} "
            f"return_model={r.get('stop_model', 'soak')} modelled={_modelled(r)}")


def _modelled(r: dict) -> str:
    """The figures the RESULT line draws from a model rather than a measurement."""
    from bench.lending_calibration import MODELLED

    if r.get("stop_model", "soak") == "soak":
        return MODELLED
    return "owner_wait=reconcile_tick+stop_s,borrower_work,owner_demand,telemetry"


def _database_run(args, spec: str, policy: str) -> dict:
    """One run in a database of its own (this process)."""
    name = spec.split(":")[0].rsplit(".", 1)[-1]
    database = f"gq_lendsim_{name}_{policy}{args.db_tag}"
    django_on_fresh_database(database, DEBUG="1")
    return simulate(spec=spec, policy=policy, days=args.days, seed=args.seed,
                    lend_after_idle_s=args.lend_after_idle_s, batch_s=args.batch_s,
                    reconcile_s=args.reconcile_s, stop_model=args.stop_model)


def main() -> None:
    from bench.lending_sim import POLICIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", action="append", help="package.module:function")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--lend-after-idle-s", type=int, default=1800)
    parser.add_argument("--batch-s", type=int, default=600)
    parser.add_argument("--reconcile-s", type=int, default=60)
    parser.add_argument("--stop-model", choices=("soak", "modelled"), default="soak",
                        help="soak: owners wait what the Slurm soak measured (default); "
                        "modelled: the reconcile tick plus the borrower's stop")
    parser.add_argument("--db-tag", default="")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    specs, policies = args.workload or list(WORKLOADS), args.policy or list(POLICIES)
    if args.one:
        result = _database_run(args, specs[0], policies[0])
        print(result_line(result))
        print("DETAIL " + json.dumps(result))
        return
    for spec in specs:
        for policy in policies:
            argv = [sys.executable, "-m", "bench.lending", "--one", "--workload", spec,
                    "--policy", policy] + [f"--{k.replace('_', '-')}={v}" for k, v in (
                        ("days", args.days), ("seed", args.seed),
                        ("lend_after_idle_s", args.lend_after_idle_s),
                        ("batch_s", args.batch_s), ("reconcile_s", args.reconcile_s),
                        ("stop_model", args.stop_model), ("db_tag", args.db_tag))]
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
            lines = [x for x in out.stdout.splitlines() if x.startswith(("RESULT", "DETAIL"))]
            if not lines:
                sys.exit(f"{spec} {policy} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
