"""Fleet page benchmark: GET /fleet/ on a fleet of 10,000 GPUs against a `SELECT count(*)`
of the same GPUs, in the same run.

    .venv/bin/python -m bench.fleet [--nodes 1250] [--gpus-per-node 8] [--windows 5] [--runs 7]

It creates (drops first) its own PostgreSQL database, migrates it and bulk-creates the
fleet: 4 clusters, 3 GPU classes, 8 teams; about 30 % of the GPUs reserved now (one
reservation and assignment each), 1 % failed and 1 % degraded, `--windows` one-minute
samples per GPU up to now. Then, in this process (DEBUG=0 settings, a signed-in admin,
Django's test client), it times the page unfiltered, searched by a piece of one GPU's
UUID, filtered (class, reserved) and on a later page: the median of `--runs` requests,
each with its query count. It is not a test.
"""

import argparse
import os
import random
import statistics
import time
import uuid
from datetime import timedelta

from bench.ingest import database_create, env_for

DATABASE = "gq_bench_fleet"


def fleet_create(nodes: int, gpus_per_node: int, windows: int):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.models import Team
    from gpuquota.ingest.models import Sample
    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuHealthInterval, Node
    from gpuquota.reservations.models import Assignment, Reservation

    rng = random.Random(12)
    now = timezone.now().replace(microsecond=0)
    admin = get_user_model().objects.create_superuser("bench-admin", "a@example.org", "x")
    clusters = Cluster.objects.bulk_create(
        [Cluster(name=f"Cluster {c}", slug=f"cluster-{c}") for c in range(4)])
    classes = GpuClass.objects.bulk_create(
        [GpuClass(name=name) for name in ("H100-80GB", "A100-40GB", "L4")])
    teams = Team.objects.bulk_create([Team(name=f"Team {t}", slug=f"team-{t}") for t in range(8)])
    node_rows = Node.objects.bulk_create([
        Node(cluster=clusters[n % 4], hostname=f"gpu-{n:05d}", last_seen_at=now,
             agent_version="1.0.0", driver_version="580.65.06") for n in range(nodes)])
    gpus = Gpu.objects.bulk_create([
        Gpu(uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128))}", node=node,
            gpu_class=classes[(n // 100) % 3], index=i, commissioned_at=now - timedelta(days=30),
            memory_total_bytes=80 * 2**30)
        for n, node in enumerate(node_rows) for i in range(gpus_per_node)], batch_size=5000)
    reserved = [g for g in gpus if rng.random() < 0.3]
    reservations = Reservation.objects.bulk_create([
        Reservation(team=rng.choice(teams), gpu_class=g.gpu_class, count=1,
                    start=now - timedelta(hours=2), end=now + timedelta(hours=6),
                    status=Reservation.Status.ACTIVE, requested_by=admin,
                    requested_at=now - timedelta(hours=3), approved_at=now - timedelta(hours=3))
        for g in reserved], batch_size=5000)
    Assignment.objects.bulk_create([
        Assignment(reservation=r, gpu=g, assigned_from=r.start, assigned_until=r.end)
        for r, g in zip(reservations, reserved, strict=True)], batch_size=5000)
    unhealthy = rng.sample(gpus, len(gpus) // 50)
    GpuHealthInterval.objects.bulk_create([
        GpuHealthInterval(gpu=g, state="failed" if k % 2 else "degraded", reason="xid 79",
                          valid_from=now - timedelta(hours=1))
        for k, g in enumerate(unhealthy)])
    first = now - timedelta(minutes=windows)
    partitions_ensure(days={first.date(), now.date()})
    Sample.objects.bulk_create([
        Sample(gpu=g, window_start=first + timedelta(minutes=w),
               window_end=first + timedelta(minutes=w + 1), readings=6,
               util_gpu_avg=rng.randrange(0, 10000) / 100, memory_used_bytes_avg=40 * 2**30,
               received_at=now)
        for g in gpus for w in range(windows)], batch_size=10000)
    return admin, gpus, classes


def timed(call, runs: int) -> tuple[float, int]:
    """Median seconds of `runs` calls and the query count of the last one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    seconds = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    database_create(DATABASE)
    os.environ.update(env_for(DATABASE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("collectstatic", "--noinput", verbosity=0)  # DEBUG=0: hashed static names

    began = time.perf_counter()
    admin, gpus, classes = fleet_create(args.nodes, args.gpus_per_node, args.windows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"fleet: {args.nodes} nodes, {len(gpus)} GPUs, {len(gpus) * args.windows} samples "
          f"({time.perf_counter() - began:.1f} s to create)")
    client = Client()
    client.force_login(admin)

    def count() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM inventory_gpu")
            cursor.fetchone()

    base, _ = timed(count, args.runs)
    print(f"{'SELECT count(*) FROM inventory_gpu':44s} {base * 1000:8.1f} ms")
    cases = [("/fleet/", {}), ("/fleet/ search a UUID piece", {"q": gpus[4321].uuid[4:12]}),
             ("/fleet/ class + reserved", {"gpu_class": classes[0].id, "reserved": "yes"}),
             ("/fleet/ page 20", {"page": "20"}), ("/fleet/ only problems", {"problems": "1"})]
    for name, params in cases:
        def get(params=params) -> None:
            response = client.get("/fleet/", params, secure=True)
            assert response.status_code == 200, response.status_code
        seconds, queries = timed(get, args.runs)
        print(f"{name:44s} {seconds * 1000:8.1f} ms  {queries:3d} queries  "
              f"x{seconds / base:,.0f} the count")


if __name__ == "__main__":
    main()
