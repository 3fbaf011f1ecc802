"""What the benches read of PostgreSQL itself: a backend's CPU time, a table's
tuple counters with autovacuum off, and a digest of the rollup rows."""

import os
import time

TICK = os.sysconf("SC_CLK_TCK")
ROLLUPS = "usage_gpuhourusage"
COUNTERS = ("live", "dead", "inserted", "updated", "hot_updated", "deleted")


def backend_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a local PostgreSQL backend (from /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pg_cpu_s() -> float:
    """User + system CPU seconds of this process's PostgreSQL backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return backend_cpu_s(cursor.fetchone()[0])


def autovacuum_off(table: str) -> None:
    """No autovacuum on `table`, and its counters from zero: what a part leaves behind."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        cursor.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", [table])


def table_counters(table: str) -> dict:
    """`table`'s tuple counters (pg_stat_user_tables), this backend's flushed first."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.5)  # a backend flushes its counters when idle, at most once a second
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, "
                       "n_tup_del FROM pg_stat_user_tables WHERE relid = %s::regclass",
                       [table])
        return dict(zip(COUNTERS, cursor.fetchone(), strict=True))


def rows_print(part: str, rows: dict) -> None:
    print(f"  rollup table after {part}: {rows['live']:,} live rows, {rows['dead']:,} dead "
          f"(autovacuum off; so far {rows['inserted']:,} inserted, {rows['updated']:,} "
          f"updated of which {rows['hot_updated']:,} HOT, {rows['deleted']:,} deleted)")


def rows_digest() -> str:
    """An md5 of every rollup row's bucket and figures: two sweeps gave the same rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM (SELECT "
                       "gpu_id, hour, kind, team_id, split_ways, failed, covered_s, busy_s, "
                       f"util_weighted, energy_j, process_count, users_seen FROM {ROLLUPS}) t")
        return cursor.fetchone()[0]
