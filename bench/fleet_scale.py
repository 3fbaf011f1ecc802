"""Every periodic loop of the beat schedule, timed at fleet scale on PostgreSQL.

    .venv/bin/python -m bench.fleet_scale [--gpus 1000 --gpus 10000 ...] [--runs 2]
        [--hours 6] [--only NAME ...] [--database gq_bench_fleet_scale]

It recreates its database, grows one fleet through the sizes given (`bench.fleet_scale_seed`:
clusters of up to 10,000 GPUs, a team per 50 GPUs, 70 % of the nodes reserved, churn, loans,
health, the last `--hours` of rollups and the open hour's samples and outbox marks), and at
each size runs every entry of the beat schedule (`gpuquota.celery.collect_beat_schedule`)
`--runs` times in this process through its Celery task (eager: the task's real code, its
services and selectors), the last run being the steady state. For each loop and size it
prints

    RESULT loop=<entry> gpus=<n> wall_s=<n> cpu_s=<n> pg_cpu_s=<n> queries=<n>
        period_s=<n> period_share=<fraction>

where cpu_s is this process's CPU (the worker), pg_cpu_s its PostgreSQL backend's and
period_share = (cpu_s + pg_cpu_s) / period: the share of one core the loop needs. After the
last size it prints per loop the growth exponent of its CPU (log of the ratio of CPU over
the log of the ratio of GPUs, between the first and last size) and of its queries, and the
share of the period it would use at 100,000 GPUs by that exponent (measured when the last
size is 100,000), flagging a loop over a quarter of its period (the budget of issue 34) or
with queries that grow with the fleet. Wall time is reported but not used for the share:
the machines these figures come from are shared. It is not a test.
"""

import argparse
import math
import os
import time
from pathlib import Path
from unittest import mock

from bench.ingest import database_create, env_for
from bench.table_stats import pg_cpu_s

DATABASE = "gq_bench_fleet_scale"
BUDGET = 0.25  # of a loop's period, on one core, at 100,000 GPUs
TARGET = 100_000


def period_s(every) -> float:
    """The interval of a beat entry's schedule: seconds, or a crontab's gap between runs."""
    if isinstance(every, int | float):
        return float(every)
    if hasattr(every, "run_every") and not hasattr(every, "minute"):
        return every.run_every.total_seconds()
    if len(every.day_of_month) < 31 or len(every.month_of_year) < 12:
        return 30 * 86400.0
    if len(every.day_of_week) < 7:
        return 7 * 86400.0 / len(every.day_of_week)
    if len(every.hour) < 24:
        return 86400.0 / len(every.hour)
    return 3600.0 / len(every.minute)


def loop_run(app, entry: dict) -> dict:
    """One run of a beat entry's task in this process: wall, CPU, backend CPU, queries."""
    from django.db import connection

    from gpuquota.core import dispatch

    task = app.tasks[entry["task"]]
    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    queued: dict[str, int] = {}

    def enqueue(name: str, kwargs: dict) -> None:  # as a broker would: queued, not run here
        queued[name] = queued.get(name, 0) + 1

    pg0 = pg_cpu_s()
    with connection.execute_wrapper(count), mock.patch.object(dispatch, "_send", enqueue):
        wall, cpu = time.perf_counter(), time.process_time()
        result = task.apply(args=entry.get("args", ()), kwargs=entry.get("kwargs", {}))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pg = max(pg_cpu_s() - pg0, 0.0)
    if result.failed():
        raise RuntimeError(f"{entry['task']} failed: {result.result!r}")
    return {"wall": wall, "cpu": cpu, "pg": pg, "queries": queries[0], "queued": queued,
            "result": result.result}


def queued_text(runs: list[dict]) -> str:
    """The tasks the runs queued on commit (name:count, summed), or -."""
    total: dict[str, int] = {}
    for run in runs:
        for name, n in run["queued"].items():
            total[name] = total.get(name, 0) + n
    return ",".join(f"{name}:{n}" for name, n in sorted(total.items())) or "-"


def exponent(a: float, b: float, n_a: int, n_b: int) -> float:
    """Growth exponent of a cost from a at n_a to b at n_b (0: constant, 1: linear)."""
    floor = 0.002  # below the clock's resolution, a cost is noise
    return math.log(max(b, floor) / max(a, floor)) / math.log(n_b / n_a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, action="append")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--only", action="append", help="beat entries to time (default all)")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--jobs-per-gpu-day", type=float, default=3.0,
                        help="Slurm jobs in accounting per GPU and day (negative: no Slurm)")
    args = parser.parse_args()
    sizes = sorted(args.gpus or [1000, 10000])
    database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.utils import timezone

    from bench.fleet_scale_seed import fleet_grow
    from bench.fleet_scale_slurm import slurm_fake_install
    from gpuquota.celery import app, collect_beat_schedule

    now = timezone.now().replace(microsecond=0)
    entries = {name: entry for name, entry in sorted(collect_beat_schedule().items())
               if not args.only or name in args.only}
    print(f"setup: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{len(entries)} beat entries; sizes {sizes}")
    measured: dict[str, dict[int, dict]] = {name: {} for name in entries}
    for size in sizes:
        began = time.perf_counter()
        added = fleet_grow(size, now, args.hours)
        if args.jobs_per_gpu_day >= 0:
            added |= slurm_fake_install(Path(os.environ["TMPDIR"] if "TMPDIR" in os.environ
                                             else "/tmp") / f"{args.database}-slurm",
                                        now, args.jobs_per_gpu_day)
        print(f"fleet: {size:,} GPUs ({added}), {time.perf_counter() - began:.0f} s to grow; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        for name, entry in entries.items():
            runs = [loop_run(app, entry) for _ in range(args.runs)]
            last, period = runs[-1], period_s(entry["schedule"])
            measured[name][size] = {**last, "period": period, "first": runs[0]}
            share = (last["cpu"] + last["pg"]) / period
            print(f"RESULT loop={name} gpus={size} wall_s={last['wall']:.3f} "
                  f"cpu_s={last['cpu']:.3f} pg_cpu_s={last['pg']:.3f} "
                  f"queries={last['queries']} period_s={period:.0f} "
                  f"period_share={share:.5f} first_run_cpu_s="
                  f"{runs[0]['cpu'] + runs[0]['pg']:.3f} first_run_queries="
                  f"{runs[0]['queries']} queued={queued_text(runs)}", flush=True)
    if len(sizes) < 2:
        return
    small, large = sizes[0], sizes[-1]
    print(f"growth {small:,} -> {large:,} GPUs; load average {os.getloadavg()[0]:.1f}")
    for name, by_size in measured.items():
        a, b = by_size[small], by_size[large]
        worst_a = max(a["cpu"] + a["pg"], a["first"]["cpu"] + a["first"]["pg"])
        worst_b = max(b["cpu"] + b["pg"], b["first"]["cpu"] + b["first"]["pg"])
        k_cpu = exponent(worst_a, worst_b, small, large)
        k_q = exponent(max(a["queries"], a["first"]["queries"]),
                       max(b["queries"], b["first"]["queries"]), small, large)
        at_target = worst_b * (TARGET / large) ** max(k_cpu, 1.0 if large < TARGET else 0)
        share = at_target / b["period"]
        flags = [f for f, bad in (("OVER_BUDGET", share > BUDGET),
                                  ("SUPERLINEAR", k_cpu > 1.2 and worst_b > 0.05),
                                  ("QUERIES_GROW", k_q > 0.2)) if bad]
        print(f"RESULT growth loop={name} cpu_exponent={k_cpu:.2f} query_exponent={k_q:.2f} "
              f"cpu_s_at_{TARGET}={at_target:.2f} period_share_at_{TARGET}={share:.4f} "
              f"{'measured' if large == TARGET else 'extrapolated'} {' '.join(flags)}",
              flush=True)


if __name__ == "__main__":
    main()
