"""The periodic collection reads the pods' and processes' records incrementally (docs/jobs.md,
Where jobs come from): from the cluster's mark less the overlap, the whole two days again
every `JOBS_COLLECT_FULL_EVERY_S`; a running pod whose records stopped ends at its last
record though the pass no longer reads it; an explicit `since` reads from there and leaves
the mark alone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.ingest.models import ProcessRecord
from gpuquota.jobs.models import Job, JobCollectMark
from gpuquota.jobs.services import jobs_collect
from tests.jobs.shapes import T0
from tests.jobs.world import JobWorld

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
MINUTE = timedelta(minutes=1)


def records(gpu, pod: str, start, minutes: int) -> None:
    ProcessRecord.objects.bulk_create([ProcessRecord(
        gpu=gpu, window_start=start + i * MINUTE, window_end=start + (i + 1) * MINUTE,
        pid=7, pid_start=hash(pod) % 1000, user="mem1", job_source="kubernetes", job_id=pod,
        job_account="vision-ns", received_at=timezone.now()) for i in range(minutes)])


def pod(name: str) -> Job:
    return Job.objects.get(source="kubernetes", job_id=name)


def test_incremental_passes_read_from_the_mark_and_a_full_one_catches_late_records(settings):
    settings.JOBS_COLLECT_OVERLAP_S = 60
    world = JobWorld.build()
    g0, g1 = world.gpus[:2]
    records(g0, "train", T0, 60)
    records(g0, "short", T0, 30)
    first = T0 + 60 * MINUTE
    jobs_collect(now=first)  # no mark yet: the whole lookback
    mark = JobCollectMark.objects.get(cluster=world.cluster)
    assert (mark.records_until, mark.full_at) == (first, first)
    assert pod("train").ended_at is None and pod("short").ended_at == T0 + 30 * MINUTE

    records(g1, "train", first, 5)  # still running, now on a second GPU too
    records(g1, "late", T0, 10)  # arrived late, its windows an hour back
    second = first + 5 * MINUTE
    jobs_collect(now=second)
    train = pod("train")
    assert train.started_at == T0 and train.gpus_held == 2  # from the mark, merged
    assert train.last_seen_at == second and train.ended_at is None
    assert not Job.objects.filter(job_id="late").exists()  # before the mark's overlap

    # The pod stops; a pass past the overlap no longer reads its records (nothing new since
    # its mark) but ends it at its last one once JOBS_REPORT_SETTLE_S has passed.
    jobs_collect(now=second + 5 * MINUTE)
    assert pod("train").ended_at is None
    jobs_collect(now=second + 15 * MINUTE)
    assert pod("train").ended_at == second and pod("train").state == "ENDED"
    assert pod("train").gpus_held == 2
    assert not Job.objects.filter(job_id="late").exists()

    # An hour after the last full read, the whole lookback again: the late pod is found.
    jobs_collect(now=first + 60 * MINUTE)
    assert pod("late").ended_at == T0 + 10 * MINUTE
    assert JobCollectMark.objects.get(cluster=world.cluster).full_at == first + 60 * MINUTE


def test_an_explicit_since_reads_from_there_and_leaves_the_mark_alone():
    world = JobWorld.build()
    records(world.gpus[0], "train", T0, 20)
    jobs_collect(now=T0 + 60 * MINUTE, since=T0 - timedelta(hours=1))
    assert pod("train").ended_at == T0 + 20 * MINUTE
    assert not JobCollectMark.objects.exists()
