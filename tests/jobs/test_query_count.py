"""The collection and the zero-use scan are set-based: the same number of queries for 4
running jobs as for 20 (Slurm runs with and without slurmctld's GPUs, pods), whether they
are new, unchanged or scanned, read whole or from the cluster's mark (issue 34's fleet-scale
check, docs/jobs.md)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.jobs.alerts import jobs_zero_use_scan
from gpuquota.jobs.models import Job
from gpuquota.jobs.services import jobs_collect
from gpuquota.schedulers.models import SlurmJob, SlurmJobGpu
from tests.jobs.shapes import T0
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
NOW = T0 + timedelta(minutes=65)  # the pods still running: records 5 min ago
SINCE = T0 - timedelta(hours=1)


def _running(world, first: int, count: int) -> None:
    """`count` running Slurm jobs, every other one without the GPUs slurmctld named (its
    processes' records name it), and as many running pods, one GPU each."""
    received = timezone.now()
    records, samples = [], []
    for n in range(first, first + count):
        gpu, start = world.gpus[n % 4], T0 + timedelta(minutes=n)
        SlurmJob.objects.create(
            cluster=world.cluster, job_id=str(900 + n), submitted_at=start, started_at=start,
            state="RUNNING", account="vision", user="mem1", partition="gpu", gpus=1,
            gpu_tres="gres/gpu:h100=1", team=world.team)
        if n % 2:
            SlurmJobGpu.objects.create(
                cluster=world.cluster, job_id=str(900 + n), node=gpu.node.hostname,
                gpu_index=gpu.index, gpu=gpu, account="vision", user="mem1",
                first_seen_at=start, last_seen_at=NOW)
        for i in range(60):
            at = start + timedelta(minutes=i)
            window = {"gpu": gpu, "window_start": at, "window_end": at + timedelta(minutes=1),
                      "received_at": received}
            samples.append(Sample(**window, readings=6, util_gpu_avg=Decimal(0),
                                  util_gpu_max=Decimal(0), memory_used_bytes_max=0))
            records.append(ProcessRecord(**window, pid=1000 + n, pid_start=1, user="mem1",
                                         job_source="slurm", job_id=str(900 + n)))
            records.append(ProcessRecord(**window, pid=2000 + n, pid_start=1, user="mem1",
                                         job_source="kubernetes", job_id=f"pod-{n}",
                                         job_account="vision-ns"))
    Sample.objects.bulk_create(samples, ignore_conflicts=True)
    ProcessRecord.objects.bulk_create(records)


def _queries(call) -> int:
    with CaptureQueriesContext(connection) as seen:
        call()
    return len(seen)


def test_queries_do_not_grow_with_the_number_of_jobs():
    world = JobWorld.build()
    counts = []
    for first, count in ((0, 2), (2, 8)):  # 2 + 2 jobs, then 10 + 10
        Job.objects.all().delete()  # each round collects every job anew
        _running(world, first, count)
        counts.append((_queries(lambda: jobs_collect(now=NOW, since=SINCE)),
                       _queries(lambda: jobs_collect(now=NOW, since=SINCE)),
                       _queries(lambda: jobs_zero_use_scan(now=NOW)),
                       _queries(lambda: jobs_collect(now=NOW))))  # periodic: the marks
        jobs = Job.objects.filter(ended_at__isnull=True)
        assert jobs.filter(source="slurm").count() == jobs.filter(
            source="kubernetes").count() == first + count
        assert sorted(set(jobs.values_list("gpus_held", flat=True))) == [1]
        assert {j.owner_id for j in jobs} == {world.member.pk}
    assert counts[0] == counts[1], counts
