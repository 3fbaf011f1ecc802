"""Ingestion benchmark: end-to-end accepted samples/s against a raw COPY of the same rows.

    .venv/bin/python -m bench.ingest [--nodes 48] [--batch-samples 1000] [--concurrency 3]

It creates (drops first) its own PostgreSQL database, migrates it, starts gunicorn as
production would (DEBUG=0, persistent connections), enrols simulated nodes (each with its
own token and 8 GPUs), then:

1. raw: one process loads rows of the same shape into the same table (`ingest_sample`)
   with psycopg binary COPY, 10,000 rows a transaction: the fastest the table takes them;
2. http: `--concurrency` senders (processes, keep-alive http.client) post pre-built batches
   for all the nodes to POST /api/v1/agent/batches; every answer must be 202.

It prints, per round and as the median of `--rounds` rounds, both rates and their ratio
(the wall ratio), the CPU seconds a sample costs each (COPY: its process and its PostgreSQL
backend; HTTP: gunicorn's processes and their backends, `bench.ingest_cpu`) and their ratio
(the CPU ratio: COPY's cost over ours, the wall ratio's measure on a machine shared with
other work), and the request latency percentiles; then one line

    RESULT ingest batch_samples=<n> rounds=<n> wall_ratio=<median> wall_ratio_spread=<min-max>
        cpu_ratio=<median> cpu_ratio_spread=<min-max> raw_cpu_us=<n> http_cpu_us=<n> ...

With `--sweep` the rollup sweep runs beside the senders (its own process, back to back, as
a worker would) and each round also says what it cost and how long its marks took to drain
after the senders were done: samples / (send time + drain time) is what ingestion and
rollups sustain together on this machine. It is not a test. Batches of 1000 samples stand for an
agent catching up on a backlog; an agent's steady-state batch (one window of its GPUs) is
dominated by the per-request cost: try `--batch-samples 64`.
"""

import argparse
import http.client
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from bench.ingest_cpu import ServerCpu, children, sweeper
from bench.table_stats import backend_cpu_s

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"
SAMPLE_TEMPLATE = (
    '{"seq":%d,"gpu_uuid":"%s","window_start":"%s","window_end":"%s","readings":6,'
    '"util_gpu_avg":%.2f,"util_gpu_max":100.0,"util_mem_avg":41.0,'
    '"memory_used_bytes_avg":61203283968,"memory_used_bytes_max":70123456512,'
    '"power_w_avg":512.0,"energy_j":30720.0,"temp_c_max":71,"clock_event_reasons":4,'
    '"ecc_uncorrected":0,"ecc_corrected":0}')
WINDOW_S = 60


def iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def env_for(database: str) -> dict:
    return {**os.environ, "DATABASE_URL": f"{PG}/{database}", "DEBUG": "0",
            "SECRET_KEY": "bench-only-secret-key-not-for-production-use-0123456789",
            "SECURE_SSL_REDIRECT": "0", "ALLOWED_HOSTS": "*", "LOG_LEVEL": "WARNING",
            "GPUQUOTA_MAIL_ENABLED": "0",
            "REDIS_URL": "", "STATIC_ROOT": str(ROOT / "var" / "bench-static")}


def database_create(database: str) -> None:
    import psycopg

    (ROOT / "var" / "bench-static").mkdir(parents=True, exist_ok=True)

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT,
                   env=env_for(database), check=True)


def nodes_enrol(count: int, gpus_per_node: int) -> list[dict]:
    """Enrol nodes through the service; each gets a token and GPU UUIDs."""
    from gpuquota.ingest.services import cluster_ensure, node_enrol

    cluster = cluster_ensure(name="bench")
    nodes = []
    for index in range(count):
        issued = node_enrol(cluster=cluster, hostname=f"bench-{index:03d}", actor=None)
        nodes.append({"token": issued.key, "hostname": issued.node.hostname,
                      "gpus": [f"GPU-{uuid.uuid4()}" for _ in range(gpus_per_node)]})
    return nodes


def batch_body(node: dict, first_window: datetime, windows: int, seq: int) -> bytes:
    samples = []
    for w in range(windows):
        start = first_window + timedelta(seconds=w * WINDOW_S)
        end = start + timedelta(seconds=WINDOW_S)
        s, e = iso(start), iso(end)
        for g, gpu in enumerate(node["gpus"]):
            samples.append(SAMPLE_TEMPLATE % (seq + w, gpu, s, e, (w * 7 + g) % 100))
    gpus = [{"uuid": gpu, "index": i, "name": "NVIDIA H200", "pci_bus_id": "",
             "memory_total_bytes": 150754820096, "power_limit_w": 700, "mig_parent_uuid": None}
            for i, gpu in enumerate(node["gpus"])]
    head = {"schema_version": 1, "batch_id": str(uuid.uuid4()),
            "agent_instance_id": str(uuid.uuid4()), "seq_first": seq, "seq_last": seq + windows,
            "sent_at": iso(datetime.now(UTC)),
            "node": {"hostname": node["hostname"], "agent_version": "1.0.0",
                     "driver_version": "580.65.06", "boot_id": "bench", "spool_backlog": 0,
                     "dropped_records_total": 0},
            "gpus": gpus, "processes": [], "events": []}
    text = json.dumps(head)[:-1] + ', "samples": [' + ",".join(samples) + "]}"
    return text.encode()


def post(conn: http.client.HTTPConnection, token: str, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/api/v1/agent/batches", body=body,
                 headers={"Authorization": f"Bearer {token}",
                          "Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def sender(port: int, jobs: list[tuple[str, bytes]], ready, start, results) -> None:
    """One keep-alive connection posting its share of the batches, one after another."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies, samples, failures = [], 0, []
    ready.release()
    start.wait()
    for token, body in jobs:
        began = time.perf_counter()
        status, payload = post(conn, token, body)
        latencies.append(time.perf_counter() - began)
        if status == 202:
            samples += json.loads(payload)["samples"]["stored"]
        else:
            failures.append((status, payload[:300]))
    results.put((samples, latencies, failures, time.perf_counter()))


def http_run(port: int, nodes: list[dict], *, batches_per_node: int, windows: int,
             concurrency: int, base: datetime, cpu: ServerCpu, sweep: bool) -> dict:
    jobs = []
    for b in range(batches_per_node):
        for node in nodes:
            first = base + timedelta(seconds=b * windows * WINDOW_S)
            jobs.append((node["token"], batch_body(node, first, windows, b * windows)))
    shares = [jobs[i::concurrency] for i in range(concurrency)]
    ctx = mp.get_context("fork")
    ready, start, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=sender, args=(port, share, ready, start, results))
             for share in shares]
    if sweep:
        senders_done, swept = ctx.Event(), ctx.Queue()
        procs.append(ctx.Process(target=sweeper, args=(ready, senders_done, swept)))
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    cpu.start()
    began = time.perf_counter()
    start.set()
    outcomes = [results.get() for _ in shares]
    sweep_result = None
    if sweep:
        senders_done.set()
        sweep_result = swept.get()
    spent = cpu.stop()
    for proc in procs:
        proc.join()
    elapsed = max(o[3] for o in outcomes) - began
    latencies = sorted(lat for o in outcomes for lat in o[1])
    failures = [f for o in outcomes for f in o[2]]
    stored = sum(o[0] for o in outcomes)
    return {"samples": stored, "seconds": elapsed, "rate": stored / elapsed,
            "batches": len(jobs), "failures": failures, **spent, "sweep": sweep_result,
            "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "max_ms": 1000 * latencies[-1], "mean_ms": 1000 * statistics.fmean(latencies)}


def raw_run(database: str, gpu_ids: list[int], *, rows: int, base: datetime) -> dict:
    """The same rows' shape, straight into ingest_sample: binary COPY, 10,000 a transaction."""
    import psycopg

    columns = ("gpu_id", "window_start", "window_end", "readings", "util_gpu_avg",
               "util_gpu_max", "util_mem_avg", "memory_used_bytes_avg", "memory_used_bytes_max",
               "power_w_avg", "energy_j", "temp_c_max", "clock_event_reasons",
               "ecc_uncorrected", "ecc_corrected", "received_at")
    types = ("int8", "timestamptz", "timestamptz", "int4", "numeric", "numeric", "numeric",
             "int8", "int8", "float8", "float8", "int2", "int8", "int8", "int8", "timestamptz")
    now = datetime.now(UTC)
    data, w = [], 0
    while len(data) < rows:
        start = base + timedelta(seconds=w * WINDOW_S)
        end = start + timedelta(seconds=WINDOW_S)
        for g, gpu_id in enumerate(gpu_ids):
            data.append((gpu_id, start, end, 6, Decimal((w * 7 + g) % 100), Decimal(100),
                         Decimal(41), 61203283968, 70123456512, 512.0, 30720.0, 71, 4, 0, 0,
                         now))
        w += 1
    data = data[:rows]
    with psycopg.connect(f"{PG}/{database}") as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.commit()
        db_cpu, cpu = backend_cpu_s(backend), time.process_time()
        began = time.perf_counter()
        for offset in range(0, len(data), 10_000):
            with conn.cursor() as cursor, cursor.copy(
                    f"COPY ingest_sample ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(types)
                for row in data[offset:offset + 10_000]:
                    copy.write_row(row)
            conn.commit()
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu + backend_cpu_s(backend) - db_cpu
    return {"samples": len(data), "seconds": elapsed, "rate": len(data) / elapsed,
            "cpu_s": cpu}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_start(database: str, port: int, workers: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "gpuquota.wsgi:application", "--workers", str(workers),
         "--bind", f"127.0.0.1:{port}", "--keep-alive", "75", "--timeout", "120",
         "--log-level", "warning"], cwd=ROOT, env=env_for(database), start_new_session=True)
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("gunicorn did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="gq_bench")
    parser.add_argument("--nodes", type=int, default=48)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--batch-samples", type=int, default=1000,
                        help="samples per batch (rounded to whole windows of all GPUs)")
    parser.add_argument("--batches-per-node", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=3, help="concurrent senders")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--raw-rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="raw + HTTP rounds, median reported (shared machines are noisy)")
    parser.add_argument("--sweep", action="store_true",
                        help="run the rollup sweep beside the senders (a process of its own, "
                             "back to back) and report its CPU and how long its marks took to "
                             "drain after the senders were done")
    parser.add_argument("--fleet-gpus", type=int, default=0,
                        help="first grow bench.fleet_scale's fleet to this many GPUs (its last "
                             "hour of rollups and the open hour's samples) beside the senders")
    args = parser.parse_args()

    database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection

    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.inventory.models import Gpu

    windows = max(1, args.batch_samples // args.gpus_per_node)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    span = timedelta(seconds=windows * WINDOW_S * args.batches_per_node)
    if span * args.rounds > timedelta(days=7, hours=12):
        raise SystemExit("too many windows per GPU: they must fit in the protocol's 8 days")
    base = now - span * args.rounds - timedelta(minutes=5)
    raw_base = now - timedelta(days=9)  # other identities, the same table
    partitions_ensure(days={(now - timedelta(days=d)).date() for d in range(-1, 9 + args.rounds)})
    if args.fleet_gpus:
        from bench.fleet_scale_seed import fleet_grow

        fleet_grow(args.fleet_gpus, now, hours=1)
    nodes = nodes_enrol(args.nodes, args.gpus_per_node)
    connection.close()

    port = free_port()
    server = server_start(args.database, port, args.workers)
    rounds = []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for node in nodes:  # heartbeat: registers the node's GPUs
            status, payload = post(conn, node["token"], batch_body(node, base, 0, 0))
            assert status == 202, payload
        gpu_ids = list(Gpu.objects.filter(node__hostname__startswith="bench-").values_list(
            "id", flat=True))
        connection.close()
        server_pids = [server.pid, *children(server.pid)]
        for number in range(args.rounds):
            # Each round: fresh identities, raw load then HTTP, back to back.
            raw = raw_run(args.database, gpu_ids, rows=args.raw_rows,
                          base=raw_base - number * timedelta(days=1))
            result = http_run(port, nodes, batches_per_node=args.batches_per_node,
                              windows=windows, concurrency=args.concurrency,
                              base=base + number * span, sweep=args.sweep,
                              cpu=ServerCpu(f"{PG}/{args.database}", server_pids))
            rounds.append((raw, result))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    report(args, windows, rounds)


def _us(cpu_s: float, samples: int) -> float:
    return 1e6 * cpu_s / samples


def report(args, windows: int, rounds: list) -> None:
    print(f"setup: {args.nodes} nodes x {args.gpus_per_node} GPUs sending, a fleet of "
          f"{args.fleet_gpus:,} GPUs beside them, "
          f"{windows * args.gpus_per_node} samples per batch, {rounds[0][1]['batches']} batches "
          f"per round, {args.concurrency} concurrent senders, gunicorn {args.workers} workers, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
          + (", the rollup sweep beside them" if args.sweep else ""))
    failures, figures = [], []
    for number, (raw, result) in enumerate(rounds, 1):
        failures += result["failures"]
        raw_us = _us(raw["cpu_s"], raw["samples"])
        http_us = _us(result["cpu_s"], result["samples"])
        figure = {"wall": result["rate"] / raw["rate"], "cpu": raw_us / http_us,
                  "raw_us": raw_us, "http_us": http_us, **result}
        print(f"round {number}: raw COPY {raw['rate']:,.0f} samples/s, {raw_us:.1f} us CPU a "
              f"sample | HTTP {result['rate']:,.0f} samples/s ({result['samples']} in "
              f"{result['seconds']:.1f} s), {http_us:.1f} us CPU a sample (gunicorn "
              f"{_us(result['server_cpu_s'], result['samples']):.1f} + PostgreSQL "
              f"{_us(result['db_cpu_s'], result['samples']):.1f}) | wall ratio "
              f"{figure['wall']:.3f}, CPU ratio {figure['cpu']:.3f} | latency p50 "
              f"{result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
              f"max {result['max_ms']:.0f} ms")
        if result["sweep"]:
            sweep = result["sweep"]
            figure["sustained"] = result["samples"] / (result["seconds"] + sweep["drain_s"])
            print(f"  sweep beside it: {sweep['marks']:,} GPU-hours recomputed, "
                  f"{_us(sweep['cpu_s'], result['samples']):.1f} us CPU a sample, drained "
                  f"{sweep['drain_s']:.1f} s after the senders; ingested and rolled up "
                  f"{figure['sustained']:,.0f} samples/s")
        figures.append(figure)
    print(_result_line(args, windows, figures))
    if failures:
        print(f"FAILURES: {len(failures)}, first: {failures[0]}")
        raise SystemExit(1)


def _result_line(args, windows: int, figures: list[dict]) -> str:
    """Medians of the rounds, the ratios' spread (min-max) beside them."""
    def median(key: str) -> float:
        return statistics.median(f[key] for f in figures)

    def spread(key: str) -> str:
        return f"{min(f[key] for f in figures):.3f}-{max(f[key] for f in figures):.3f}"

    line = (f"RESULT ingest batch_samples={windows * args.gpus_per_node} rounds={len(figures)} "
            f"wall_ratio={median('wall'):.3f} wall_ratio_spread={spread('wall')} "
            f"cpu_ratio={median('cpu'):.3f} cpu_ratio_spread={spread('cpu')} "
            f"raw_cpu_us={median('raw_us'):.1f} http_cpu_us={median('http_us'):.1f} "
            f"http_rate={median('rate'):.0f} p99_ms={median('p99_ms'):.0f}")
    if args.sweep:
        line += f" sustained_with_rollups={median('sustained'):.0f}"
    return line + f" load={os.getloadavg()[0]:.1f}"


if __name__ == "__main__":
    main()
