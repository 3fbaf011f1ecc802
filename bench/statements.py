"""Statement benchmark: drafting every team's statement of a month, and the admins'
review page, against PostgreSQL scanning the same month's rollups, in the same run.

    .venv/bin/python -m bench.statements [--gpus 10000] [--teams 200] [--rounds 3]

It creates (drops first) its own PostgreSQL database (`BENCH_DATABASE`, default
gpuquota_bench_statements), migrates it, and fills October 2026
with SQL `generate_series`: `--gpus` GPUs in three classes (H100 with a rate change inside
an hour), `--teams` teams, two assignment halves a month for 70 % of the GPUs (about 2
reservations of 5 GPUs per team and class), 1 % of the GPUs failed for five hours, and one
rollup row per GPU-hour (two in the H100 rate-change hour). Then, per round:

1. scan: `SELECT count(*)` over the month's rollups, and one GROUP BY (team, class, rate
   card, kind) summing busy seconds: what reading those rows costs PostgreSQL at least;
2. draft: `statements_draft_month` for every team (chargeable seconds, utilization,
   pricing, the statements and lines written);
3. review: the review page (`/statements/review/?month=2026-10`) rendered for an admin;
   round 1's is the process's first request ("cold"), after booting as a server does
   (`gpuquota.wsgi`, which loads the URLconf and every view module; timed apart).

It prints each round and the medians; the target is draft ≤ 5 × scan and review < 1 s.
It is not a test.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"
DATABASE = os.environ.get("BENCH_DATABASE", "gpuquota_bench_statements")
MONTH_START, MONTH_END = "2026-10-01 00:00:00+00", "2026-11-01 00:00:00+00"
RATE_CHANGE = "2026-10-15 12:30:00+00"
NOW = datetime(2026, 11, 10, tzinfo=UTC)


def database_create() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")


FILL_SQL = """
INSERT INTO inventory_gpuclass (id, name, description) VALUES
  (1, 'H100-80GB', ''), (2, 'A100-40GB', ''), (3, 'L4', '');
INSERT INTO reports_ratecard (gpu_class_id, valid_from, valid_until, reserved_rate,
                              on_demand_rate, borrowed_rate, currency) VALUES
  (1, '2026-01-01', %(rate_change)s, 2.50, 3.00, 1.50, 'USD'),
  (1, %(rate_change)s, NULL, 2.75, 3.20, 1.60, 'USD'),
  (2, '2026-01-01', NULL, 1.40, 1.70, 0.85, 'USD'),
  (3, '2026-01-01', NULL, 0.60, 0.80, 0.40, 'USD');
INSERT INTO accounts_team (id, name, slug, cost_center, cost_center_owner_email, created_at)
  SELECT t, 'Team ' || t, 'team-' || t, 'CC-' || (1000 + t), '', now()
  FROM generate_series(1, %(teams)s) t;
INSERT INTO inventory_cluster (id, name, slug, scheduler, description)
  VALUES (1, 'Bench', 'bench', 'slurm', '');
INSERT INTO inventory_node (id, hostname, created_at, agent_version, driver_version, boot_id,
                            cluster_id)
  SELECT n, 'node-' || n, now(), '', '', '', 1 FROM generate_series(0, (%(gpus)s - 1) / 8) n;
INSERT INTO inventory_gpu (id, uuid, model_name, index, pci_bus_id, commissioned_at,
                           gpu_class_id, node_id)
  SELECT i, 'GPU-' || md5(i::text)::uuid, '', (i - 1) %% 8, '', '2026-01-01', 1 + i %% 3,
         (i - 1) / 8
  FROM generate_series(1, %(gpus)s) i;
INSERT INTO inventory_gpuclassinterval (valid_from, gpu_id, gpu_class_id)
  SELECT '2026-01-01', id, gpu_class_id FROM inventory_gpu;
INSERT INTO inventory_gpuhealthinterval (gpu_id, state, valid_from, valid_until, reason,
                                         closed_reason, boot_id)
  SELECT id, 'failed', '2026-10-20 03:00+00', '2026-10-20 08:00+00', 'xid 79', 'bench', ''
  FROM inventory_gpu WHERE id %% 100 = 0;
INSERT INTO accounts_user (id, password, is_superuser, username, first_name, last_name,
                           email, is_staff, is_active, date_joined, timezone, email_opt_out,
                           is_finance)
  VALUES (1, '', true, 'admin', '', '', 'admin@example.org', true, true, now(), 'UTC', false,
          false);
-- two halves a month; reservation per (half, group of 15 GPUs, class): 5 GPUs each
CREATE TEMP TABLE bench_assign AS
  SELECT i AS gpu_id, k,
         k * 1000000 + ((i - 1) / 15) * 3 + i %% 3 + 1 AS reservation_id,
         (((i - 1) / 15) * 3 + i %% 3 + k) %% %(teams)s + 1 AS team_id,
         1 + i %% 3 AS gpu_class_id,
         CASE WHEN k = 0 THEN timestamptz %(start)s + (i %% 48) * interval '1 hour'
              ELSE timestamptz '2026-10-16 00:00+00' END AS assigned_from,
         CASE WHEN k = 0 THEN timestamptz '2026-10-16 00:00+00'
              ELSE timestamptz %(end)s - (i %% 24) * interval '1 hour' END AS assigned_until
  FROM generate_series(1, %(gpus)s) i, generate_series(0, 1) k WHERE i %% 10 < 7;
INSERT INTO reservations_reservation (id, count, start, "end", placement, status, over_quota,
    is_backfill, purpose, requested_at, decision_reason, gpu_class_id, requested_by_id,
    team_id)
  SELECT reservation_id, count(*), min(assigned_from), max(assigned_until), 'any', 'ended',
         false, true, 'bench', min(assigned_from), '', min(gpu_class_id), 1, min(team_id)
  FROM bench_assign GROUP BY reservation_id;
INSERT INTO reservations_assignment (assigned_from, assigned_until, end_reason, gpu_id,
                                     reservation_id)
  SELECT assigned_from, assigned_until, 'scheduled', gpu_id, reservation_id FROM bench_assign;
-- one rollup row per GPU-hour (two in the H100 rate-change hour), built by hash joins
CREATE TEMP TABLE bench_ids AS
  SELECT a.gpu_id, CASE WHEN a.assigned_from < '2026-10-16 00:00+00' THEN 0 ELSE 1 END AS k,
         a.id, a.reservation_id, r.team_id, a.assigned_from, a.assigned_until
  FROM reservations_assignment a JOIN reservations_reservation r ON r.id = a.reservation_id;
CREATE TEMP TABLE bench_hour_cards AS
  SELECT h, c.gpu_class_id, c.id AS card,
         extract(epoch FROM LEAST(h + interval '1 hour', COALESCE(c.valid_until, 'infinity'))
                 - GREATEST(h, c.valid_from))::int AS seconds
  FROM generate_series(timestamptz %(start)s, timestamptz %(end)s - interval '1 hour',
                       interval '1 hour') h
  JOIN reports_ratecard c ON c.valid_from < h + interval '1 hour'
                         AND (c.valid_until IS NULL OR c.valid_until > h);
ANALYZE bench_ids; ANALYZE bench_hour_cards;
INSERT INTO usage_gpuhourusage (hour, kind, split_ways, failed, covered_s, busy_s,
    util_weighted, energy_j, process_count, users_seen, computed_at, assignment_id, gpu_id,
    gpu_class_id, reservation_id, team_id, rate_card_id)
  SELECT hc.h, CASE WHEN a.id IS NULL THEN 'unreserved' ELSE 'reserved' END, 1,
         g.id %% 100 = 0 AND hc.h >= '2026-10-20 03:00+00' AND hc.h < '2026-10-20 08:00+00',
         hc.seconds, (hc.seconds * ((g.id + extract(hour FROM hc.h)::int) %% 10)) / 10, 0, 0,
         1, '[]', now(), a.id, g.id, g.gpu_class_id, a.reservation_id,
         COALESCE(a.team_id, CASE WHEN g.id %% 4 = 0 THEN g.id %% %(teams)s + 1 END), hc.card
  FROM inventory_gpu g
  JOIN bench_hour_cards hc ON hc.gpu_class_id = g.gpu_class_id
  LEFT JOIN bench_ids a
    ON a.gpu_id = g.id AND a.k = CASE WHEN hc.h < '2026-10-16 00:00+00' THEN 0 ELSE 1 END
   AND a.assigned_from <= hc.h AND a.assigned_until > hc.h;
SELECT setval(pg_get_serial_sequence('accounts_team', 'id'), %(teams)s);
SELECT setval(pg_get_serial_sequence('accounts_user', 'id'), 1);
ANALYZE;
"""


def fill(gpus: int, teams: int) -> float:
    """The month's rows; the rollup table's indexes are built after its bulk insert (as a
    restore would), which is much faster than maintaining them row by row."""
    from django.db import connection

    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = "
                       "'usage_gpuhourusage' AND indexname NOT LIKE '%%pkey'")
        indexes = cursor.fetchall()
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        # generated rows are consistent by construction: skip the per-row foreign-key
        # triggers (millions of queued checks at the end of the statement)
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(FILL_SQL, {"gpus": gpus, "teams": teams, "rate_change": RATE_CHANGE,
                                  "start": MONTH_START, "end": MONTH_END})
        cursor.execute("SET session_replication_role = DEFAULT")
        for _name, definition in indexes:
            cursor.execute(definition)
        cursor.execute("ANALYZE")
    return time.perf_counter() - began


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def review_cpu(client) -> tuple[float, float]:
    """(wall, process CPU) seconds of one review page render."""
    cpu = time.process_time()
    wall = review(client)
    return wall, time.process_time() - cpu


def scan() -> float:
    from django.db import connection

    def run():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM usage_gpuhourusage WHERE hour >= %s AND "
                           "hour < %s", [MONTH_START, MONTH_END])
            cursor.fetchall()
            cursor.execute(
                "SELECT team_id, gpu_class_id, rate_card_id, kind, sum(busy_s) "
                "FROM usage_gpuhourusage WHERE hour >= %s AND hour < %s "
                "GROUP BY team_id, gpu_class_id, rate_card_id, kind", [MONTH_START, MONTH_END])
            cursor.fetchall()
    return timed(run)


def draft() -> tuple[float, int]:
    from gpuquota.core.timeutil import Period
    from reports.services_statements import statements_draft_month

    result = []
    seconds = timed(lambda: result.extend(
        statements_draft_month(period=Period.month(2026, 10), now=NOW)))
    return seconds, len(result)


def review(client) -> float:
    def run():
        response = client.get("/statements/review/?month=2026-10")
        assert response.status_code == 200, response.status_code
    return timed(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    database_create()
    os.environ.update(DATABASE_URL=f"{PG}/{DATABASE}", REDIS_URL="", DEBUG="1",
                      SECRET_KEY="bench-only-secret-key-not-for-production-use-0123456789",
                      SECURE_SSL_REDIRECT="0", ALLOWED_HOSTS="*", GPUQUOTA_MAIL_ENABLED="0",
                      LOG_LEVEL="WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    from accounts.models import User

    call_command("migrate", verbosity=0)
    cpu, wall = time.process_time(), time.perf_counter()
    import gpuquota.wsgi  # noqa: F401 - boot as a server does: the URLconf and views load here
    print(f"server boot (gpuquota.wsgi): {time.perf_counter() - wall:.2f} s, "
          f"{time.process_time() - cpu:.2f} s CPU", flush=True)
    print(f"filling {args.gpus} GPUs, {args.teams} teams, October 2026...", flush=True)
    print(f"fill: {fill(args.gpus, args.teams):.1f} s", flush=True)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM usage_gpuhourusage")
        rollups = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM reservations_assignment")
        assignments = cursor.fetchone()[0]
    print(f"{rollups} rollup rows, {assignments} assignments", flush=True)

    setup_test_environment()
    client = Client(HTTP_HOST="localhost", secure=True)
    client.force_login(User.objects.get(username="admin"))
    rounds = []
    for index in range(args.rounds):
        scan_s = scan()
        draft_s, statements = draft()
        review_s, review_cpu_s = review_cpu(client)
        rounds.append((scan_s, draft_s, review_s))
        print(f"round {index + 1}: scan {scan_s:.2f} s | draft {statements} statements "
              f"{draft_s:.2f} s ({draft_s / scan_s:.2f} x scan) | review page {review_s:.2f} s "
              f"({review_cpu_s:.2f} s CPU{', cold: first request' if index == 0 else ''})",
              flush=True)
    scan_m, draft_m, review_m = (statistics.median(r[i] for r in rounds) for i in range(3))
    print(f"median: scan {scan_m:.2f} s | draft {draft_m:.2f} s = {draft_m / scan_m:.2f} x scan "
          f"(target <= 5) | review page {review_m:.2f} s (target < 1 s)")


if __name__ == "__main__":
    main()
