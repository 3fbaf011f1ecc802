"""The pages of issue 34 timed on bench.fleet_scale's generated organisation.

    .venv/bin/python -m bench.fleet_scale_pages [--gpus 1000 --gpus 10000 --gpus 100000]
        [--requests 3]
        [--hours 3] [--database gq_bench_fleet_pages] [--jobs-per-gpu-day 0.3]

It recreates its database and grows one fleet through the sizes given
(`bench.fleet_scale_seed`, with the Slurm stand-ins of `bench.fleet_scale_slurm`). At each
size it adds hardware XIDs (`hardware_events_add`: what the reliability figures read) and
first runs every loop of the beat schedule once (`bench.fleet_scale.loop_run`: the
statements are drafted, the jobs imported and reported, the reclaim findings and the
reliability figures written, as at steady state). Then, with the clock stopped at the
instant the fleet was seeded (time-machine: the agents report, whatever the seeding took),
it runs the loops that precompute what pages read (`MEASURED_LOOPS`) again and prints
their cost and share of their period (`RESULT loop=`), and requests each page of `PAGES`
as a superuser through Django's test client (`DEBUG=0`, hashed static names) `--requests`
times and prints, for the median request,

    RESULT page=<name> gpus=<n> wall_s=<n> cpu_s=<n> pg_cpu_s=<n> queries=<n> status=<code>

(cpu_s: this process's CPU, pg_cpu_s: its PostgreSQL backend's, less sensitive than wall
time to the load of a shared machine). `--reuse` measures the pages of the database as the
last run left it (one `--gpus`, its size, for the label); `--page NAME` (repeatable) only
those pages, `--skip-loops` without running the precomputing loops again first.

After the last size, `RESULT growth page=<name>` gives the growth of its queries and time
from the first to the last size, flagged `QUERIES_GROW` (more queries on the larger fleet)
or `OVER_1S` (slower than a second at the last size): the budget of issue 34. Wall time on a
shared machine is noisy; the queries are exact. It is not a test (tests/bench holds the
small check in CI).
"""

import argparse
import os
import time
from pathlib import Path

import time_machine

from bench.ingest import database_create, env_for

DATABASE = "gq_bench_fleet_pages"


def pages(team: str, cluster: str) -> dict[str, str]:
    """The pages whose cost must not grow with the fleet, by name: their URLs."""
    return {
        "fleet": "/fleet/",
        "utilization": "/fleet/utilization/",
        "utilization-7d": "/fleet/utilization/?last=7d",
        "team": f"/teams/{team}/",
        "team-jobs": f"/teams/{team}/jobs/",
        "clusters": "/schedulers/",
        "cluster": f"/schedulers/{cluster}/",
        "lending": "/lending/",
        "statements-review": "/statements/review/",
        "reliability": "/fleet/reliability/",
        "job-waste": "/manage/jobs/",
        "reclaim": "/reclaim/",
    }


def page_get(client, url: str) -> dict:
    """One request of a page: its status, wall and CPU seconds and queries."""
    from django.db import connection

    from bench.table_stats import pg_cpu_s

    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    connection.ensure_connection()
    pg = pg_cpu_s()
    with connection.execute_wrapper(count):
        began, cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"status": response.status_code, "wall": wall, "cpu": cpu,
            "pg": max(pg_cpu_s() - pg, 0.0), "queries": queries[0]}


def pages_measure(client, urls: dict[str, str], requests: int) -> dict[str, dict]:
    """Each page requested `requests` times: the request of median wall time."""
    measured = {}
    for name, url in urls.items():
        runs = sorted((page_get(client, url) for _ in range(requests)), key=lambda r: r["wall"])
        measured[name] = runs[len(runs) // 2]
    return measured


#: The beat loops that exist for the pages (what they read, precomputed): timed here.
MEASURED_LOOPS = ("reliability-figures", "usage-fleet-summary")


def loop_text(name: str, size: int, run: dict, period_s: float) -> str:
    """The RESULT line of a loop's run: its cost and the share of its period it takes."""
    cpu = run["cpu"] + run["pg"]
    return (f"RESULT loop={name} gpus={size} wall_s={run['wall']:.3f} cpu_s={run['cpu']:.3f} "
            f"pg_cpu_s={run['pg']:.3f} queries={run['queries']} period_s={period_s:.0f} "
            f"cpu_share={cpu / period_s:.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, action="append")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--hours", type=int, default=3)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--jobs-per-gpu-day", type=float, default=0.3)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--page", action="append", help="only this page (repeatable)")
    parser.add_argument("--skip-loops", action="store_true",
                        help="with --reuse: the precomputing loops' last rows as they are")
    args = parser.parse_args()
    sizes = sorted(args.gpus or [1000, 10000])
    if not args.reuse:
        database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db.models import Max
    from django.test import Client
    from django.utils import timezone

    from bench.fleet_scale import loop_run
    from bench.fleet_scale_seed import fleet_grow, hardware_events_add
    from bench.fleet_scale_slurm import slurm_fake_install
    from gpuquota.celery import app, collect_beat_schedule
    from gpuquota.inventory.models import Gpu, Node

    settings.LENDING_ENABLED = True
    call_command("collectstatic", "--noinput", verbosity=0)
    now = timezone.now().replace(microsecond=0)
    entries = collect_beat_schedule()
    urls = pages(team="team-0", cluster="cluster-0")
    if args.page:
        urls = {name: urls[name] for name in args.page}
    print(f"setup: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{len(urls)} pages; sizes {sizes}", flush=True)
    measured: dict[int, dict[str, dict]] = {}
    for size in sizes:
        began = time.perf_counter()
        if not args.reuse:
            after = Gpu.objects.order_by("-id").values_list("id", flat=True).first() or 0
            added = fleet_grow(size, now, args.hours)
            added["events"] = hardware_events_add(now, after_gpu_id=after)
            added |= slurm_fake_install(Path(os.environ.get("TMPDIR", "/tmp"))
                                        / f"{args.database}-slurm", now, args.jobs_per_gpu_day)
            for entry in entries.values():
                loop_run(app, entry)
            print(f"fleet: {size:,} GPUs ({added}), {time.perf_counter() - began:.0f} s to "
                  f"grow and run the loops; load average {os.getloadavg()[0]:.1f}", flush=True)
        seeded = Node.objects.aggregate(at=Max("last_seen_at"))["at"]
        # at the instant the fleet was seeded, however long that and the loops took: the
        # agents report, the open hour's samples are fresh
        with time_machine.travel(seeded, tick=False):
            for name in () if args.skip_loops else MEASURED_LOOPS:  # what the pages read,
                # written again (idempotent)
                print(loop_text(name, size, loop_run(app, entries[name]),
                                entries[name]["schedule"]), flush=True)
            client = Client()
            client.force_login(get_user_model().objects.get(username="bench-admin"))
            measured[size] = pages_measure(client, urls, args.requests)
        for name, run in measured[size].items():
            print(f"RESULT page={name} gpus={size} wall_s={run['wall']:.3f} "
                  f"cpu_s={run['cpu']:.3f} pg_cpu_s={run['pg']:.3f} queries={run['queries']} "
                  f"status={run['status']}", flush=True)
    if len(sizes) < 2:
        return
    small, large = sizes[0], sizes[-1]
    for name in urls:
        a, b = measured[small][name], measured[large][name]
        flags = [f for f, bad in (("QUERIES_GROW", b["queries"] > a["queries"]),
                                  ("OVER_1S", b["wall"] > 1.0)) if bad]
        print(f"RESULT growth page={name} gpus={small}->{large} queries={a['queries']}->"
              f"{b['queries']} wall_s={a['wall']:.3f}->{b['wall']:.3f} {' '.join(flags)}",
              flush=True)


if __name__ == "__main__":
    main()
