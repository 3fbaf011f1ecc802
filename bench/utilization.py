"""Utilization and team page benchmark: GET /fleet/utilization/ and /teams/<slug>/ on
10,000 GPUs with a month of hourly rollups, against a scan of the same month's rollups
(`SELECT sum(...) FROM usage_gpuhourusage` over the month), in the same run.

    .venv/bin/python -m bench.utilization [--gpus 10000] [--runs 3] [--reuse]

It creates (drops first) its own PostgreSQL database (`gq_bench_utilpage`), migrates it
and seeds with SQL (`generate_series`), not through the sweep: 3 GPU classes, 8 teams,
`--gpus` GPUs in service since before last month, about 30 % of them assigned to 12
reservations per team for the whole time, one rollup row per GPU-hour from the first
of last month to the current hour (reserved rows of the assignments; unreserved rows,
a third of them owned by a team) and their day rows, minute samples of the open hour
for every GPU and an outbox mark per GPU for it, as in steady state. Then, in this process (DEBUG=0
settings, a signed-in admin, Django's test client), it times the utilization page for
last month (a whole month of rollups), the month to date, the last 24 h and 7 days,
and a team's page for both months: the median of `--runs` requests with its query
count, this process's CPU time and the PostgreSQL backend's (parallel workers not
counted), and the ratio to the scan. `--reuse` skips the seeding (about 20 minutes on a
busy 2-core machine) and times the pages on the database an earlier run left. It is
not a test.
"""

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

from bench.ingest import database_create, env_for
from bench.table_stats import backend_cpu_s

DATABASE = "gq_bench_utilpage"
TEAMS = 8
RESERVATIONS_PER_TEAM = 12


def _month_start(at: datetime) -> datetime:
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def fleet_seed(gpus: int, now: datetime) -> dict:
    """The fleet, its reservations, a month of rollup rows and the open hour's samples."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from accounts.models import Team
    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuClassInterval, Node
    from gpuquota.reservations.models import Assignment, Reservation
    from gpuquota.usage.rollup_days import rollup_days_rebuild
    from gpuquota.usage.rollup_fleet import rollup_fleet_rebuild

    this_month = _month_start(now)
    first = _month_start(this_month - timedelta(days=1))
    open_hour = now.replace(minute=0, second=0, microsecond=0)
    admin = get_user_model().objects.create_superuser("bench-admin", "a@example.org", "x")
    cluster = Cluster.objects.create(name="Cluster", slug="cluster")
    classes = GpuClass.objects.bulk_create(
        [GpuClass(name=name) for name in ("H100-80GB", "A100-40GB", "L4")])
    teams = Team.objects.bulk_create(
        [Team(name=f"Team {t}", slug=f"team-{t}") for t in range(TEAMS)])
    nodes = Node.objects.bulk_create([
        Node(cluster=cluster, hostname=f"gpu-{n:05d}", last_seen_at=now)
        for n in range(gpus // 8)])
    commissioned = first - timedelta(days=30)
    fleet = Gpu.objects.bulk_create([
        Gpu(uuid=f"GPU-{n:08x}-0000-4000-8000-000000000000", node=nodes[n // 8],
            gpu_class=classes[(n // 800) % 3], index=n % 8, commissioned_at=commissioned)
        for n in range(len(nodes) * 8)], batch_size=5000)
    GpuClassInterval.objects.bulk_create([
        GpuClassInterval(gpu=g, gpu_class_id=g.gpu_class_id, valid_from=commissioned)
        for g in fleet], batch_size=5000)
    # 30 % reserved: per team RESERVATIONS_PER_TEAM reservations of consecutive GPUs
    per = max(1, int(len(fleet) * 0.3) // (TEAMS * RESERVATIONS_PER_TEAM))
    start, end = first - timedelta(days=1), this_month + timedelta(days=31)
    assignments = []
    for k in range(TEAMS * RESERVATIONS_PER_TEAM):
        chunk = fleet[k * per * 3 : k * per * 3 + per]  # spread over the classes
        if not chunk:
            break
        reservation = Reservation.objects.create(
            team=teams[k % TEAMS], gpu_class_id=chunk[0].gpu_class_id, count=len(chunk),
            start=start, end=end, status=Reservation.Status.ACTIVE, requested_by=admin,
            requested_at=start, approved_at=start)
        assignments += [Assignment(reservation=reservation, gpu=g, assigned_from=start,
                                   assigned_until=end)
                        for g in chunk if g.gpu_class_id == chunk[0].gpu_class_id]
    Assignment.objects.bulk_create(assignments, batch_size=5000)
    partitions_ensure(days={open_hour.date()})
    day = first
    with connection.cursor() as cursor:
        while day <= open_hour:  # one statement per day of rollups
            cursor.execute(ROLLUP_SQL, {"start": day, "end": min(day + timedelta(days=1),
                                                                 open_hour + timedelta(hours=1)),
                                        "team0": teams[0].id, "now": now})
            day += timedelta(days=1)
        cursor.execute(SAMPLES_SQL, {"start": open_hour, "end": now, "now": now})
        cursor.execute(MARKS_SQL, {"hour": open_hour, "now": now})
    rollup_days_rebuild()  # the day rows the sweep would have kept with the hourly ones
    rollup_fleet_rebuild()  # and the fleet's
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE usage_gpuhourusage")  # as autovacuum would, after a load
        cursor.execute("VACUUM ANALYZE usage_gpudayusage")
        cursor.execute("ANALYZE")
    return {"admin": admin, "team": teams[0], "gpus": len(fleet),
            "reserved": len(assignments), "first": first, "this_month": this_month}


# One row per GPU-hour: reserved on its assignment, else unreserved (a third owned by one
# of the teams); covered and busy seconds vary by GPU and hour.
ROLLUP_SQL = """
INSERT INTO usage_gpuhourusage (gpu_id, hour, gpu_class_id, kind, assignment_id,
    reservation_id, team_id, split_ways, failed, rate_card_id, covered_s, busy_s,
    util_weighted, energy_j, memory_used_bytes_max, process_count, users_seen, computed_at)
SELECT g.id, h, g.gpu_class_id,
       CASE WHEN a.id IS NULL THEN 'unreserved' ELSE 'reserved' END,
       a.id, a.reservation_id,
       CASE WHEN a.id IS NOT NULL THEN r.team_id
            WHEN (g.id + x.n) %% 3 = 0 THEN %(team0)s + (g.id %% 8) END,
       1, false, NULL, x.covered, least(x.covered, x.busy),
       least(x.covered, x.busy) * 61.25 + (x.covered - least(x.covered, x.busy)) * 1.5,
       x.covered * 300.0, 40 * 1073741824::bigint, 1, '[]'::jsonb, %(now)s
FROM inventory_gpu g
LEFT JOIN reservations_assignment a ON a.gpu_id = g.id
LEFT JOIN reservations_reservation r ON r.id = a.reservation_id
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour',
                           interval '1 hour') h
CROSS JOIN LATERAL (SELECT (extract(epoch FROM h) / 3600)::bigint AS n) n0
CROSS JOIN LATERAL (SELECT n0.n AS n, 3600 - ((g.id * 7 + n0.n) %% 5) * 120 AS covered,
                           ((g.id * 7919 + n0.n * 104729) %% 4000) AS busy) x
WHERE g.parent_id IS NULL
"""

SAMPLES_SQL = """
INSERT INTO ingest_sample (gpu_id, window_start, window_end, readings, util_gpu_avg,
    memory_used_bytes_avg, memory_used_bytes_max, received_at)
SELECT g.id, m, m + interval '1 minute', 6, ((g.id * 31 + extract(minute FROM m)) %% 100),
       40 * 1073741824::bigint, 40 * 1073741824::bigint, %(now)s
FROM inventory_gpu g
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 minute',
                           interval '1 minute') m
"""

MARKS_SQL = """
INSERT INTO usage_dirtygpuhour (gpu_id, hour, generation, marked_at, due_at)
SELECT id, %(hour)s, 1, %(now)s::timestamptz - interval '1 minute',
       %(now)s::timestamptz + interval '4 minutes'
FROM inventory_gpu
"""


def seeded_find(now: datetime) -> dict:
    """What `fleet_seed` made, found in a database seeded by an earlier run."""
    from django.contrib.auth import get_user_model

    from accounts.models import Team
    from gpuquota.inventory.models import Gpu
    from gpuquota.reservations.models import Assignment

    this_month = _month_start(now)
    return {"admin": get_user_model().objects.get(username="bench-admin"),
            "team": Team.objects.get(slug="team-0"), "gpus": Gpu.objects.count(),
            "reserved": Assignment.objects.count(),
            "first": _month_start(this_month - timedelta(days=1)), "this_month": this_month}


def timed(call, runs: int, pid: int) -> tuple[float, float, float, int]:
    """Median wall seconds, Python CPU and backend CPU of `runs` calls, and the query
    count of the last one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    results = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as queries:
            wall, cpu, db = time.perf_counter(), time.process_time(), backend_cpu_s(pid)
            call()
            results.append((time.perf_counter() - wall, time.process_time() - cpu,
                            backend_cpu_s(pid) - db))
    results.sort()
    wall, cpu, db = results[len(results) // 2]
    return wall, cpu, db, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true",
                        help="time the pages on the database a previous run seeded")
    args = parser.parse_args()
    if not args.reuse:
        database_create(DATABASE)
    os.environ.update(env_for(DATABASE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("collectstatic", "--noinput", verbosity=0)  # DEBUG=0: hashed static names
    now = datetime.now(UTC).replace(microsecond=0)
    began = time.perf_counter()
    seeded = seeded_find(now) if args.reuse else fleet_seed(args.gpus, now)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM usage_gpuhourusage")
        rows = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM usage_gpudayusage")
        day_rows = cursor.fetchone()[0]
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    print(f"fleet: {seeded['gpus']} GPUs ({seeded['reserved']} reserved), {rows:,} rollup "
          f"rows ({day_rows:,} day rows) from {seeded['first']:%Y-%m-%d} "
          f"({time.perf_counter() - began:.0f} s to seed)")
    client = Client()
    client.force_login(seeded["admin"])
    last_month, this_month = seeded["first"], seeded["this_month"]

    def scan(start: datetime, end: datetime):
        def run() -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT sum(covered_s), sum(busy_s), sum(util_weighted) FROM "
                               "usage_gpuhourusage WHERE hour >= %s AND hour < %s",
                               [start, end])
                cursor.fetchone()
        return run

    base = {}
    for name, start, end in (("last month", last_month, this_month),
                             ("this month", this_month, this_month + timedelta(days=31))):
        wall, cpu, db, _ = timed(scan(start, end), args.runs, pid)
        base[name] = wall
        print(f"{'scan of the rollups, ' + name:44s} {wall * 1000:8.0f} ms  "
              f"cpu {cpu:5.2f} s  db {db:5.2f} s")
    slug = seeded["team"].slug
    cases = [("/fleet/utilization/ last month", "/fleet/utilization/",
              {"month": f"{last_month:%Y-%m}"}, "last month"),
             ("/fleet/utilization/ month to date", "/fleet/utilization/", {}, "this month"),
             ("/fleet/utilization/ last 24 h", "/fleet/utilization/", {"last": "24h"},
              "this month"),
             ("/fleet/utilization/ last 7 days", "/fleet/utilization/", {"last": "7d"},
              "last month"),
             (f"/teams/{slug}/ last month", f"/teams/{slug}/",
              {"month": f"{last_month:%Y-%m}"}, "last month"),
             (f"/teams/{slug}/ month to date", f"/teams/{slug}/", {}, "this month"),
             ("/fleet/", "/fleet/", {}, "this month")]
    for name, path, params, against in cases:
        def get(path=path, params=params) -> None:
            response = client.get(path, params, secure=True)
            assert response.status_code == 200, response.status_code
        wall, cpu, db, queries = timed(get, args.runs, pid)
        print(f"{name:44s} {wall * 1000:8.0f} ms  cpu {cpu:5.2f} s  db {db:5.2f} s  "
              f"{queries:3d} queries  x{wall / base[against]:.2f} the scan of {against}")


if __name__ == "__main__":
    main()
