"""Rollup benchmark: what the outbox sweep costs against what ingesting the same samples
costs, on a simulated fleet fed through the real ingestion service (issue 13).

    .venv/bin/python -m bench.rollups [--nodes 100] [--minutes 60] [--backfill-gpus 100]
        [--parts steady,backfill,scale-out] [--scale-out-rounds 2] [--database NAME]

It recreates database `--database` (gq_bench_rollups, or $BENCH_ROLLUPS_DATABASE), with
autovacuum off for the rollup table and the outbox so their dead rows can be counted, enrols
`--nodes` nodes of 8 GPUs, then:

1. steady state: simulated time (time_machine) runs through one hour; every node sends a
   batch per 60 s window (the agents' default; 8 samples and 8 process records) to
   `batch_ingest`, spread over the first 30 s after the window closes; the sweep
   (`dirty_hours_process(due_by=now)`, as beat's task) runs every 15 s of simulated time,
   until two minutes after the hour closed. CPU is counted for the worker process
   (process_time) and for its PostgreSQL backend (/proc/<pid>/stat), split between
   ingest and sweep. The outbox table runs without autovacuum, so its dead tuples
   (pg_stat_user_tables) show what marking and sweeping leave behind;
2. backfill: a dense day (24 hours of 60 s windows with processes) for `--backfill-gpus`
   GPUs stored in hour-long batches, then recomputed by one catch-up sweep;
3. scale-out: the backfill day marked dirty again and swept by one, then by two worker
   processes (`--scale-out-rounds` times each, alternately, the same dirty set each
   time); the rows must be identical. Each run's CPU (workers and their PostgreSQL
   backends) per GPU-hour is printed next to its wall time, so a loaded machine shows.

It prints recomputes per GPU-hour, sweep and ingest CPU per GPU-hour and their ratio,
GPUs one worker core keeps current, the worst lag and the worst delay before a closed hour
is final (each against its setting), the outbox's dead tuples, backfill GPU-hours per second,
the two-worker speed-up, and the rollup table's live and dead rows after each part. Run only
some parts with `--parts` (e.g. `--parts backfill,scale-out`: no steady state). It is not a
test.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta

from bench.ingest import ROOT, batch_body, database_create, env_for
from bench.table_stats import (
    ROLLUPS,
    autovacuum_off,
    pg_cpu_s,
    rows_digest,
    rows_print,
    table_counters,
)

DATABASE = os.environ.get("BENCH_ROLLUPS_DATABASE") or "gq_bench_rollups"
M, H, S = timedelta(minutes=1), timedelta(hours=1), timedelta(seconds=1)


class Meter:
    """Worker and database CPU seconds spent inside `with meter:` blocks."""

    def __init__(self):
        self.worker_s = self.db_s = self.wall_s = 0.0

    def __enter__(self):
        self._start = (time.process_time(), pg_cpu_s(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        cpu, db, wall = self._start
        self.worker_s += time.process_time() - cpu
        self.db_s += pg_cpu_s() - db
        self.wall_s += time.perf_counter() - wall

    @property
    def total_s(self) -> float:
        return self.worker_s + self.db_s


def nodes_enrol(count: int, prefix: str) -> list[dict]:
    """Enrol nodes of 8 GPUs through the service."""
    from gpuquota.ingest.services import cluster_ensure, node_enrol

    cluster = cluster_ensure(name="bench")
    return [{"hostname": node_enrol(cluster=cluster, hostname=f"{prefix}-{index:03d}",
                                    actor=None).node.hostname,
             "gpus": [f"GPU-{uuid.uuid4()}" for _ in range(8)]} for index in range(count)]


def body_for(node: dict, window_start, windows: int, seq: int) -> dict:
    body = json.loads(batch_body(node, window_start, windows, seq))
    body["processes"] = [
        {"gpu_uuid": sample["gpu_uuid"], "window_start": sample["window_start"],
         "window_end": sample["window_end"], "pid": 4000 + i % 8, "pid_start": 1,
         "uid": 1000 + i % 8, "user": f"user{i % 8}", "command": "python",
         "job": {"source": "slurm", "id": str(100 + i % 8), "account": "physics"},
         "memory_used_bytes_max": 60129542144, "util_sm_avg": 83.0}
        for i, sample in enumerate(body["samples"])]
    return body


class Lags:
    """Sample arrival to the sweep that rolled it up (plus that sweep's wall time, as the
    clock stands still under time_machine): the worst over all samples, and the worst over
    the samples that arrived after their hour closed (how long a closed hour waits to be
    final)."""

    def __init__(self):
        self.pending: dict[tuple, object] = {}  # (gpu uuid, hour): first arrival not swept
        self.closed: dict[tuple, object] = {}  # the same, arrivals after the hour's end
        self.worst_s = self.worst_final_s = 0.0

    def arrived(self, key: tuple, at) -> None:
        self.pending.setdefault(key, at)
        if at >= key[1] + H:
            self.closed.setdefault(key, at)

    def swept(self, key: tuple, at, wall_s: float) -> None:
        if (since := self.pending.pop(key, None)) is not None:
            self.worst_s = max(self.worst_s, (at - since).total_seconds() + wall_s)
        if (since := self.closed.pop(key, None)) is not None:
            self.worst_final_s = max(self.worst_final_s, (at - since).total_seconds() + wall_s)


def steady_state(nodes: list[dict], minutes: int, base) -> dict:
    import time_machine

    from gpuquota.ingest.batches import batch_ingest
    from gpuquota.inventory.models import Gpu, Node
    from gpuquota.outbox.conf import dirty_sweep_interval_s
    from gpuquota.outbox.models import DirtyGpuHour
    from gpuquota.usage import sweep
    from gpuquota.usage.conf import dirty_sweep_batch

    outbox = DirtyGpuHour._meta.db_table
    node_rows = {n.hostname: n for n in Node.objects.all()}
    recomputed: list[tuple] = []
    real = sweep.gpu_hours_replace

    def counted(*, gpu_ids, hour, hours=1, fleet=None):
        recomputed.extend((gpu_id, hour + i * H) for i in range(hours) for gpu_id in gpu_ids)
        return real(gpu_ids=gpu_ids, hour=hour, hours=hours, fleet=fleet)

    sweep.gpu_hours_replace = counted
    events = []
    for minute in range(1, minutes + 1):
        for i in range(len(nodes)):
            arrival = base + minute * M + S * (30 * i // len(nodes))
            events.append((arrival, 1, i, base + (minute - 1) * M))
    end = base + minutes * M + 2 * M + S
    sweep_at, interval = base, dirty_sweep_interval_s() * S
    while sweep_at <= end:
        events.append((sweep_at, 0, -1, None))
        sweep_at += interval
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    ingest, swept, lags = Meter(), Meter(), Lags()
    gpu_of = {}
    worst_sweep_wall = 0.0
    autovacuum_off(outbox)
    with time_machine.travel(base, tick=False) as clock:
        for at, kind, index, window in events:
            clock.move_to(at)
            if kind == 1:
                node = nodes[index]
                with ingest:
                    batch_ingest(node=node_rows[node["hostname"]],
                                 body=body_for(node, window, 1, (window - base) // M),
                                 now=at, check_age=False)
                for uuid in node["gpus"]:
                    lags.arrived((uuid, window.replace(minute=0, second=0)), at)
                continue
            before = len(recomputed)
            wall = time.perf_counter()
            with swept:
                sweep.dirty_hours_process(limit=dirty_sweep_batch(), due_by=at)
            wall = time.perf_counter() - wall
            worst_sweep_wall = max(worst_sweep_wall, wall)
            if any(gpu_id not in gpu_of for gpu_id, _ in recomputed[before:]):
                gpu_of = dict(Gpu.objects.values_list("id", "uuid"))
            for gpu_id, hour in recomputed[before:]:
                lags.swept((gpu_of.get(gpu_id), hour), at, wall)
    sweep.gpu_hours_replace = real
    gpu_hours = len(nodes) * 8 * minutes / 60
    return {"gpu_hours": gpu_hours, "recomputes": len(recomputed), "ingest": ingest,
            "sweep": swept, "worst_lag_s": lags.worst_s,
            "worst_final_s": lags.worst_final_s, "worst_sweep_wall_s": worst_sweep_wall,
            "unswept": len(lags.pending), "outbox": table_counters(outbox)}


def backfill(nodes: list[dict], hours: int, base) -> dict:
    from django.utils import timezone

    from gpuquota.ingest.batches import batch_ingest
    from gpuquota.inventory.models import Node
    from gpuquota.usage.sweep import dirty_hours_process

    node_rows = {n.hostname: n for n in Node.objects.all()}
    for hour in range(hours):
        for node in nodes:
            batch_ingest(node=node_rows[node["hostname"]],
                         body=body_for(node, base + hour * H, 60, hour * 60),
                         now=timezone.now(), check_age=False)
    meter = Meter()
    with meter:
        while dirty_hours_process(limit=5000):
            pass
    return {"gpu_hours": len(nodes) * 8 * hours, "meter": meter}


def scale_out(gpu_ids: list[int], base, hours: int, workers: int) -> dict:
    """The day marked dirty, swept by `workers` processes starting together: wall time
    from the first one's first sweep to the last one's end (start-up excluded), CPU of the
    workers and of their PostgreSQL backends."""
    from django.db import transaction

    from gpuquota.outbox.services import gpu_interval_mark_dirty

    with transaction.atomic():
        gpu_interval_mark_dirty(gpu_ids=gpu_ids, start=base, end=base + hours * H)
    env = {**os.environ, "BENCH_SWEEP_AT": str(time.time() + 15)}
    procs = [subprocess.Popen([sys.executable, "-m", "bench.rollups", "--sweeper"], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(workers)]
    runs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return {"wall_s": max(r["end"] for r in runs) - min(r["start"] for r in runs),
            "cpu_s": sum(r["cpu_s"] for r in runs), "digest": rows_digest(),
            "marks": sum(r["marks"] for r in runs)}


def sweeper() -> None:
    from gpuquota.outbox.models import DirtyGpuHour
    from gpuquota.usage.sweep import dirty_hours_process

    marks, meter = 0, Meter()
    started = time.time()
    with meter:
        while DirtyGpuHour.objects.exists():
            marks += dirty_hours_process()
    print(json.dumps({"start": started, "end": time.time(), "cpu_s": meter.total_s,
                      "marks": marks}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--backfill-gpus", type=int, default=100)
    parser.add_argument("--backfill-hours", type=int, default=24)
    parser.add_argument("--parts", default="steady,backfill,scale-out",
                        help="which parts to run, comma-separated (scale-out needs backfill's "
                        "day, so it runs backfill too)")
    parser.add_argument("--scale-out-rounds", type=int, default=2,
                        help="one-worker and two-worker sweeps of the day, each, alternately")
    parser.add_argument("--database", default=DATABASE,
                        help=f"the database it recreates (default {DATABASE})")
    parser.add_argument("--sweeper", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.sweeper:
        database_create(args.database)
        os.environ.update(env_for(args.database))  # the sweepers inherit it
        import psycopg

        with psycopg.connect(env_for(args.database)["DATABASE_URL"], autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {ROLLUPS} SET (autovacuum_enabled = off)")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    if args.sweeper:
        # both workers start sweeping together, whatever their start-up took
        time.sleep(max(0.0, float(os.environ.get("BENCH_SWEEP_AT", "0")) - time.time()))
        return sweeper()
    from django.utils import timezone

    from gpuquota.core.timeutil import hour_floor

    parts = set(args.parts.split(","))
    if "steady" in parts and args.minutes:
        fleet = nodes_enrol(args.nodes, "steady")
        base = hour_floor(timezone.now()) - 3 * H
        _steady_print(steady_state(fleet, args.minutes, base), args)
        rows_print("the steady state", table_counters(ROLLUPS))
    if parts & {"backfill", "scale-out"}:
        _backfill_and_scale_out(args, "scale-out" in parts)


def _steady_print(steady: dict, args) -> None:
    hours, ingest, swept = steady["gpu_hours"], steady["ingest"], steady["sweep"]
    per = {name: m.total_s / hours for name, m in (("ingest", ingest), ("sweep", swept))}
    print(f"steady state: {args.nodes * 8} GPUs, {args.minutes} simulated minutes "
          f"({hours:.0f} GPU-hours), sweep every 15 s")
    print(f"  recomputes per GPU-hour        {steady['recomputes'] / hours:.2f}")
    print(f"  ingest CPU per GPU-hour        {per['ingest']:.4f} s (worker "
          f"{ingest.worker_s / hours:.4f}, PostgreSQL {ingest.db_s / hours:.4f})")
    print(f"  sweep CPU per GPU-hour         {per['sweep']:.4f} s (worker "
          f"{swept.worker_s / hours:.4f}, PostgreSQL {swept.db_s / hours:.4f})")
    print(f"  sweep / ingest CPU             {per['sweep'] / per['ingest']:.2f}")
    print(f"  GPUs one worker core keeps current  {3600 / (swept.worker_s / hours):,.0f} "
          f"(worker and database CPU together: {3600 / per['sweep']:,.0f})")
    _freshness_print(steady)


def _freshness_print(steady: dict) -> None:
    from gpuquota.outbox.conf import (
        dirty_sweep_interval_s,
        rollup_final_delay_s,
        rollup_freshness_s,
    )

    lag, final = steady["worst_lag_s"], steady["worst_final_s"]
    print(f"  worst lag (sample arrival to rollup) {lag:.1f} s = "
          f"{lag / rollup_freshness_s():.2f} × USAGE_ROLLUP_FRESHNESS_S ({rollup_freshness_s():.0f}"
          f" s); sweep interval {dirty_sweep_interval_s():.0f} s")
    print(f"  worst closed hour final (last sample to rollup) {final:.1f} s = "
          f"{final / rollup_final_delay_s():.2f} × USAGE_ROLLUP_FINAL_DELAY_S "
          f"({rollup_final_delay_s():.0f} s)")
    print(f"  slowest sweep {steady['worst_sweep_wall_s']:.2f} s wall; GPU-hours left dirty "
          f"{steady['unswept']}")
    churn, hours = steady["outbox"], steady["gpu_hours"]
    print(f"  outbox (autovacuum off): {churn['dead']:,} dead tuples = "
          f"{churn['dead'] / hours:.1f} per GPU-hour; {churn['updated']:,} updates "
          f"({churn['hot_updated']:,} HOT), {churn['inserted']:,} inserts, "
          f"{churn['deleted']:,} deletes, {churn['live']:,} live")


def _backfill_and_scale_out(args, scale: bool) -> None:
    from django.utils import timezone

    from gpuquota.core.timeutil import hour_floor
    from gpuquota.inventory.models import Gpu

    day = hour_floor(timezone.now()) - (args.backfill_hours + 5) * H
    day_fleet = nodes_enrol(math.ceil(args.backfill_gpus / 8), "backfill")
    filled = backfill(day_fleet, args.backfill_hours, day)
    meter, gpu_hours = filled["meter"], filled["gpu_hours"]
    print(f"backfill: {gpu_hours} dense GPU-hours recomputed in {meter.wall_s:.1f} s "
          f"wall: {gpu_hours / meter.wall_s:.0f} GPU-hours/s ({gpu_hours / meter.total_s:.0f} "
          f"per CPU-second, worker {meter.worker_s:.1f} s + database {meter.db_s:.1f} s); "
          f"a month for 1,000 GPUs: {744_000 / (gpu_hours / meter.wall_s) / 60:.0f} min wall, "
          f"{744_000 / (gpu_hours / meter.total_s) / 60:.0f} min of CPU")
    rows_print("the backfill", table_counters(ROLLUPS))
    if not scale:
        return
    uuids = {gpu for node in day_fleet for gpu in node["gpus"]}
    gpu_ids = list(Gpu.objects.filter(uuid__in=uuids).values_list("id", flat=True))
    digest = rows_digest()
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.scale_out_rounds):
        for workers in (1, 2):
            run = scale_out(gpu_ids, day, args.backfill_hours, workers)
            runs[workers].append(run)
            print(f"  day swept by {workers} worker(s): {run['wall_s']:.1f} s wall, "
                  f"{run['cpu_s'] / gpu_hours * 1000:.2f} ms CPU per GPU-hour (workers and "
                  f"database), {run['marks']} marks")
    one, two = (statistics.median(r["wall_s"] for r in runs[n]) for n in (1, 2))
    same = all(r["digest"] == digest for rs in runs.values() for r in rs)
    print(f"scale-out: median wall by 1 worker {one:.1f} s, by 2 workers {two:.1f} s: "
          f"speed-up {one / two:.2f} ({'identical rows' if same else 'ROWS DIFFER'})")
    rows_print("the scale-out sweeps", table_counters(ROLLUPS))


if __name__ == "__main__":
    main()
