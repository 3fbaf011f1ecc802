"""The periodic job collection, full two-day read against incremental (docs/jobs.md, Where
jobs come from; docs/benchmarks.md#job-collection).

    .venv/bin/python -m bench.jobs_collect [--gpus 16] [--short-pods 400] [--runs 3]

On a fresh database (`gq_<user>_jobs_collect`, or --database): one cluster with `--gpus` GPUs,
each running one pod for the last two days (a process record a minute), and `--short-pods`
pods of 30 minutes spread over the two days. Then, with the jobs already collected (the
steady state: nothing new to write), it times `jobs_collect` reading the whole lookback (as
every pass did before) and reading from a mark five minutes old (an incremental pass), and
prints, for each:

    RESULT mode=<full|incremental> records_read=<n> queries=<n> wall_ms=<median>
           cpu_ms=<median, this process>
"""

import argparse
import getpass
import statistics
import time
from datetime import UTC, datetime, timedelta

from bench.simdb import django_on_fresh_database

NOW = datetime(2026, 11, 4, 8, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _seed(gpus: int, short_pods: int) -> object:
    from django.utils import timezone

    from gpuquota.ingest.models import ProcessRecord
    from tests.factories import ClusterFactory, GpuClassFactory, NodeFactory, make_gpu

    cluster = ClusterFactory(name="Bench", slug="bench")
    h100 = GpuClassFactory(name="H100")
    nodes = [NodeFactory(cluster=cluster, hostname=f"n{i}") for i in range((gpus + 7) // 8)]
    devices = [make_gpu(node=nodes[i // 8], gpu_class=h100, index=i % 8) for i in range(gpus)]
    received, start = timezone.now(), NOW - timedelta(days=2)
    batch = []

    def record(gpu, pod: str, at: datetime, pid: int) -> None:
        batch.append(ProcessRecord(gpu=gpu, window_start=at, window_end=at + MINUTE, pid=pid,
                                   pid_start=1, user="u1", job_source="kubernetes",
                                   job_id=pod, job_account="ns", received_at=received))
        if len(batch) >= 20000:
            ProcessRecord.objects.bulk_create(batch)
            batch.clear()

    for g, gpu in enumerate(devices):
        for m in range(2 * 24 * 60):
            record(gpu, f"long-{g}", start + m * MINUTE, 100 + g)
    step = (2 * 24 * 60 - 30) // max(1, short_pods)
    for p in range(short_pods):
        for m in range(30):
            record(devices[p % gpus], f"short-{p}", start + (p * step + m) * MINUTE, 5000 + p)
    ProcessRecord.objects.bulk_create(batch)
    return cluster


def _measure(call, runs: int, before=lambda: None) -> tuple[int, float, float]:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    walls, cpus, queries = [], [], 0
    for _ in range(runs):
        before()
        reset_queries()
        with CaptureQueriesContext(connection) as seen:
            wall, cpu = time.perf_counter(), time.process_time()
            call()
            walls.append(1000 * (time.perf_counter() - wall))
            cpus.append(1000 * (time.process_time() - cpu))
        queries = len(seen)
    return queries, statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--short-pods", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database", default=f"gq_{getpass.getuser()}_jobs_collect")
    args = parser.parse_args(argv)
    django_on_fresh_database(args.database)
    from gpuquota.ingest.models import ProcessRecord
    from gpuquota.jobs import conf
    from gpuquota.jobs.models import Job, JobCollectMark
    from gpuquota.jobs.services import LOOKBACK, jobs_collect

    cluster = _seed(args.gpus, args.short_pods)
    jobs_collect(now=NOW, since=NOW - LOOKBACK)  # the steady state: every job known
    print(f"jobs={Job.objects.count()} records={ProcessRecord.objects.count()}")

    def mark_five_minutes_old():
        JobCollectMark.objects.update_or_create(cluster=cluster, defaults={
            "records_until": NOW - 5 * MINUTE, "full_at": NOW - 10 * MINUTE})

    overlap = timedelta(seconds=conf.collect_overlap_s())
    for mode, call, before, since in (
            ("full", lambda: jobs_collect(now=NOW, since=NOW - LOOKBACK), lambda: None,
             NOW - LOOKBACK),
            ("incremental", lambda: jobs_collect(now=NOW), mark_five_minutes_old,
             NOW - 5 * MINUTE - overlap)):
        read = ProcessRecord.objects.filter(window_start__gte=since,
                                            window_start__lt=NOW).count()
        queries, wall, cpu = _measure(call, args.runs, before)
        print(f"RESULT mode={mode} records_read={read} queries={queries} wall_ms={wall:.0f} "
              f"cpu_ms={cpu:.0f}")


if __name__ == "__main__":
    main()
