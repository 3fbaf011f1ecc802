"""Ingestion benchmark: end-to-end accepted samples/s against a raw COPY of the same rows.

    .venv/bin/python -m bench.ingest [--nodes 48] [--batch-samples 1000] [--concurrency 3]

It creates (drops first) its own PostgreSQL database, migrates it, starts gunicorn as
production would (DEBUG=0, persistent connections), enrols simulated nodes (each with its
own token and 8 GPUs), then:

1. raw: one process loads rows of the same shape into the same table (`ingest_sample`)
   with psycopg binary COPY, 10,000 rows a transaction: the fastest the table takes them;
2. http: `--concurrency` senders (processes, keep-alive http.client) post pre-built batches
   for all the nodes to POST /api/v1/agent/batches; every answer must be 202.

It prints, per round and as the median of `--rounds` rounds, both rates, their ratio and
the request latency percentiles. It is not a test. Batches of 1000 samples stand for an
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
             concurrency: int, base: datetime) -> dict:
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
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    began = time.perf_counter()
    start.set()
    outcomes = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    elapsed = max(o[3] for o in outcomes) - began
    latencies = sorted(lat for o in outcomes for lat in o[1])
    failures = [f for o in outcomes for f in o[2]]
    stored = sum(o[0] for o in outcomes)
    return {"samples": stored, "seconds": elapsed, "rate": stored / elapsed,
            "batches": len(jobs), "failures": failures,
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
    return {"samples": len(data), "seconds": elapsed, "rate": len(data) / elapsed}


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
        for number in range(args.rounds):
            # Each round: fresh identities, raw load then HTTP, back to back.
            raw = raw_run(args.database, gpu_ids, rows=args.raw_rows,
                          base=raw_base - number * timedelta(days=1))
            result = http_run(port, nodes, batches_per_node=args.batches_per_node,
                              windows=windows, concurrency=args.concurrency,
                              base=base + number * span)
            rounds.append((raw, result))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    report(args, windows, rounds)


def report(args, windows: int, rounds: list) -> None:
    print(f"setup: {args.nodes} nodes x {args.gpus_per_node} GPUs sending, a fleet of "
          f"{args.fleet_gpus:,} GPUs beside them, "
          f"{windows * args.gpus_per_node} samples per batch, {rounds[0][1]['batches']} batches "
          f"per round, {args.concurrency} concurrent senders, gunicorn {args.workers} workers, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    failures = []
    for number, (raw, result) in enumerate(rounds, 1):
        failures += result["failures"]
        print(f"round {number}: raw COPY {raw['rate']:,.0f} samples/s | HTTP "
              f"{result['rate']:,.0f} samples/s ({result['samples']} in "
              f"{result['seconds']:.1f} s) | ratio {result['rate'] / raw['rate']:.3f} | "
              f"latency p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
              f"max {result['max_ms']:.0f} ms")
    raw_rate = statistics.median(raw["rate"] for raw, _ in rounds)
    http_rate = statistics.median(result["rate"] for _, result in rounds)
    ratio = statistics.median(result["rate"] / raw["rate"] for raw, result in rounds)
    p99 = statistics.median(result["p99_ms"] for _, result in rounds)
    print(f"median of {len(rounds)} rounds: raw COPY (binary, 10k rows/txn, 1 process) "
          f"{raw_rate:,.0f} samples/s; HTTP end to end {http_rate:,.0f} samples/s; "
          f"ratio {ratio:.3f} (target >= 0.25); p99 {p99:.0f} ms (target < 250)")
    if failures:
        print(f"FAILURES: {len(failures)}, first: {failures[0]}")
        raise SystemExit(1)

if __name__ == "__main__":
    main()
