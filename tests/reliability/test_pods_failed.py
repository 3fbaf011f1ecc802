"""Pods a node's or device's trouble killed are failed jobs of the lemon test, like Slurm's
NODE_FAIL (docs/reliability.md#jobs-that-failed-on-it): on the GPUs their processes ran
on, against the job-days of every pod the jobs app collected there; one killed within
INCIDENT_GAP after a hardware failure of its GPU is that incident's, not counted again."""

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from django.utils import timezone

from gpuquota.ingest.models import GpuEvent, ProcessRecord
from gpuquota.ingest.partitions import partitions_ensure
from gpuquota.inventory.models import Cluster
from gpuquota.jobs.models import Job, JobGpu
from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.lemons import units
from gpuquota.schedulers.models import PodKilled
from tests.factories import ClusterFactory, GpuClassFactory, NodeFactory, make_gpu

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
AS_OF = datetime(2026, 10, 6, tzinfo=UTC)
START = AS_OF - timedelta(days=40)
KILLS = [datetime(2026, 10, 4, h, 0, tzinfo=UTC) for h in (2, 6, 10, 14)]


@pytest.fixture(scope="module", autouse=True)
def _partitions(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        partitions_ensure(days=[date(2026, 10, 3), date(2026, 10, 4)])


def _pod_killed(cluster, gpu, name: str, ended: datetime, reason: str) -> None:
    """A pod run for 3 hours on `gpu` (its processes' records) and killed at `ended`."""
    PodKilled.objects.create(cluster=cluster, namespace="vision", name=name,
                             uid=f"uid-{name}", reason=reason, ended_at=ended)
    began = ended - timedelta(hours=3)
    ProcessRecord.objects.bulk_create([ProcessRecord(
        gpu=gpu, window_start=began + timedelta(minutes=m),
        window_end=began + timedelta(minutes=m + 1), pid=100, pid_start=1,
        job_source="kubernetes", job_id=name, job_account="vision",
        received_at=timezone.now()) for m in range(0, 180, 10)])
    job = Job.objects.create(cluster=cluster, source=Job.Source.KUBERNETES, job_id=name,
                             account="vision", started_at=began,
                             ended_at=ended - timedelta(minutes=1), state="ENDED")
    JobGpu.objects.create(job=job, gpu=gpu)


def test_pods_killed_are_failed_jobs_against_every_pods_job_days(db):
    cluster = ClusterFactory(slug="kube", scheduler=Cluster.Scheduler.KUBERNETES)
    node = NodeFactory(cluster=cluster, hostname="gpu-a")
    h100 = GpuClassFactory(name="H100-80GB")
    gpus = [make_gpu(node=node, gpu_class=h100, index=i, at=START) for i in range(3)]
    # Every GPU runs a pod a day, each of 20 hours (the jobs app's runs): 30 pod-days of
    # 20 hours; the pods ended normally.
    for i, gpu in enumerate(gpus):
        for n in range(30):
            began = START + timedelta(days=n)
            job = Job.objects.create(cluster=cluster, source=Job.Source.KUBERNETES,
                                     job_id=f"train-{i}-{n}", account="vision",
                                     started_at=began, ended_at=began + timedelta(hours=20),
                                     state="ENDED")
            JobGpu.objects.create(job=job, gpu=gpu)
    # GPU 1: three pods killed for its node's or device's trouble with no XID behind them,
    # and one its own XID 79 killed (the incident's).
    for name, at, reason in (("a", KILLS[0], "DeletionByTaintManager"),
                             ("b", KILLS[1], "DeletionByDeviceTaintManager"),
                             ("c", KILLS[2], "Evicted")):
        _pod_killed(cluster, gpus[1], name, at, reason)
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=node, gpu=gpus[1],
                            ts=KILLS[3] - timedelta(minutes=2), type="xid", xid=79,
                            received_at=KILLS[3])
    _pod_killed(cluster, gpus[1], "d", KILLS[3], "DeletionByDeviceTaintManager")

    history = fleet_history(as_of=AS_OF, since=START)
    by_key = {u.key: u for u in units(history, "gpu")}
    tested, healthy = by_key[gpus[1].uuid], by_key[gpus[0].uuid]
    assert tested.jobs_failed(START, AS_OF) == 3
    assert healthy.jobs_failed(START, AS_OF) == 0
    # job-days: 30 pods of 20 hours each, and on GPU 1 the 4 killed pods' 3 hours (their
    # collected runs are the killed ones', counted once)
    assert healthy.job_days(START, AS_OF) == pytest.approx(25.0)
    assert tested.job_days(START, AS_OF) == pytest.approx(25.5)
    assert sorted(k.job_id for k in history.killed) == [
        "vision/a", "vision/b", "vision/c", "vision/d"]
