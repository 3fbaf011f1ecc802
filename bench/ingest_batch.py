"""One agent's batches through the ingestion endpoint in this process: CPU per batch.

    .venv/bin/python -m bench.ingest_batch --database gq_bench [--windows 1] [--batches 40]

On a database `bench.ingest` left (its fleet, `--fleet-gpus`, included), it enrols one node
of 8 GPUs, posts `--batches` batches of `--windows` 60 s windows each (8 samples a window)
through Django's test client, and prints per batch the wall time, this process's CPU and
its PostgreSQL backend's, and the queries of one batch:

    RESULT ingest_batch samples=<n> wall_ms=<n> cpu_ms=<n> pg_cpu_ms=<n> queries=<n>

Unlike `bench.ingest` (end to end, against a raw COPY in the same run) it leaves out
gunicorn and the senders, so it tells what one batch costs the server, and whether that
depends on the fleet's size (run it on databases of two sizes). Keep `--batches` under the
node's rate limit (`INGEST_RATE_*`). It is not a test.
"""

import argparse
import os
import time
import uuid
from datetime import UTC, datetime, timedelta

from bench.ingest import batch_body, env_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", default="gq_bench")
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.db import connection
    from django.test import Client

    from bench.table_stats import pg_cpu_s
    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.ingest.services import cluster_ensure, node_enrol

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    base = now - timedelta(minutes=args.batches * args.windows + 10)
    partitions_ensure(days={(base + timedelta(days=d)).date() for d in range(-1, 9)})
    issued = node_enrol(cluster=cluster_ensure(name="bench-batch"),
                        hostname=f"batch-{uuid.uuid4().hex[:8]}", actor=None)
    node = {"token": issued.key, "hostname": issued.node.hostname,
            "gpus": [f"GPU-{uuid.uuid4()}" for _ in range(8)]}
    client, auth = Client(), {"HTTP_AUTHORIZATION": f"Bearer {node['token']}"}

    def post(body: bytes) -> None:
        response = client.post("/api/v1/agent/batches", body, content_type="application/json",
                               **auth)
        assert response.status_code == 202, response.content[:300]

    post(batch_body(node, base, 0, 0))  # the heartbeat that registers the GPUs
    bodies = [batch_body(node, base + timedelta(minutes=i * args.windows), args.windows,
                         i * args.windows) for i in range(args.batches)]
    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        post(bodies[0])
    pg, wall, cpu = pg_cpu_s(), time.perf_counter(), time.process_time()
    for body in bodies[1:]:
        post(body)
    n = len(bodies) - 1
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pg = pg_cpu_s() - pg
    print(f"RESULT ingest_batch samples={8 * args.windows} wall_ms={1000 * wall / n:.1f} "
          f"cpu_ms={1000 * cpu / n:.1f} pg_cpu_ms={1000 * pg / n:.1f} "
          f"queries={queries[0]} load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
