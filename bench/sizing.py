"""Sizing benchmark: what an hour of a GPU costs to keep, in PostgreSQL bytes and CPU, and
what a web process holds in memory, for docs/operations.md's sizing table.

    .venv/bin/python -m bench.sizing [--nodes 25] [--minutes 60] [--database NAME]

It recreates database `--database` (gq_bench_sizing), runs bench.rollups' steady state
(`--nodes` nodes of 8 GPUs, one batch per node per 60 s window with a process record per
sample, through the real ingestion service; the sweep every 15 s) for `--minutes` simulated
minutes, then reads from PostgreSQL the bytes (table, indexes and TOAST) of the partitions
and tables that hold the run's rows: raw samples, process records, batch receipts, hourly
rollups and the audit log. It also starts gunicorn (one worker, DEBUG=0) on the database
and reads the worker's resident memory after it served a few requests. It prints RESULT
lines; docs/operations.md derives the table from them. It is not a test.
"""

import argparse
import os
import signal
import urllib.request

from bench.ingest import database_create, env_for, free_port, server_start
from bench.rollups import nodes_enrol, steady_state

DATABASE = os.environ.get("BENCH_SIZING_DATABASE") or "gq_bench_sizing"
#: The tables whose bytes grow with the fleet's hours (partitioned ones summed over the
#: partitions that hold rows).
GROWING = {"raw samples": "ingest_sample", "process records": "ingest_processrecord",
           "batch receipts": "ingest_agentbatch", "hourly rollups": "usage_gpuhourusage"}


def table_bytes(table: str) -> tuple[int, int]:
    """(rows, bytes with indexes and TOAST) of `table`, over its partitions that hold rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
        parts = cursor.fetchall()
        size = 0
        for name, _rows in parts:
            cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [name])
            size += cursor.fetchone()[0]
    return sum(rows for _, rows in parts), size


def worker_rss_mb(database: str) -> float:
    """Resident memory of a gunicorn worker that has served the API schema and /healthz."""
    port = free_port()
    server = server_start(database, port, 1)
    try:
        for path in ("/healthz", "/api/schema/"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120).read()
        children = open(f"/proc/{server.pid}/task/{server.pid}/children").read().split()
        with open(f"/proc/{children[0]}/status") as status:
            rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return rss_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=25)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--database", default=DATABASE)
    args = parser.parse_args()
    database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.db import connection
    from django.utils import timezone

    from gpuquota.core.timeutil import hour_floor

    fleet = nodes_enrol(args.nodes, "sizing")
    base = hour_floor(timezone.now()) - 3 * timezone.timedelta(hours=1)
    steady = steady_state(fleet, args.minutes, base)
    gpu_hours = steady["gpu_hours"]
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"setup: {args.nodes * 8} GPUs, {args.minutes} simulated minutes ({gpu_hours:.0f} "
          f"GPU-hours), one 60 s window per node per minute, a process record per sample, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    total = 0
    for what, table in GROWING.items():
        rows, size = table_bytes(table)
        total += size
        print(f"RESULT sizing {what}: {rows:,} rows, {size:,} bytes, "
              f"{size / max(rows, 1):.0f} bytes per row, {size / gpu_hours:,.0f} bytes per "
              f"GPU-hour")
    print(f"RESULT sizing bytes per GPU-hour (these tables): {total / gpu_hours:,.0f}")
    cpu = (steady["ingest"].total_s + steady["sweep"].total_s) / gpu_hours
    print(f"RESULT sizing CPU per GPU-hour (ingest + sweep, worker + PostgreSQL): {cpu:.4f} s")
    connection.close()
    print(f"RESULT sizing gunicorn worker resident memory: {worker_rss_mb(args.database):.0f} MB")


if __name__ == "__main__":
    main()
