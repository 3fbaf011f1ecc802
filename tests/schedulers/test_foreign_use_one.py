"""One definition of foreign use (docs/accounting.md#foreign-use), whatever the scheduler:
the same situation built on a Slurm cluster (its accounting and the GPUs slurmctld said
each job held) and on a Kubernetes cluster (the agents' process records) gives the same
uses, in the same period, from the one method every page calls."""

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import ClusterIdentity
from gpuquota.core.timeutil import Period
from gpuquota.ingest.models import ProcessRecord
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.schedulers.backend import backend_class
from gpuquota.schedulers.models import ReservationBinding, SlurmJob, SlurmJobGpu
from gpuquota.schedulers.selectors import foreign_use
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS
from reports.foreign import foreign_use_by_cluster
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    ClusterIdentityFactory,
    GpuClassFactory,
    NodeFactory,
    TeamFactory,
    make_gpu,
)

pytestmark = pytest.mark.django_db

DECEMBER, NOVEMBER = Period.month(2026, 12), Period.month(2026, 11)
#: The reservation straddles the statement periods: November's last hours to Dec 10.
START, END = datetime(2026, 11, 30, 20, tzinfo=UTC), datetime(2026, 12, 10, 12, tzinfo=UTC)


def _slurm_ran(cluster, gpu, account, job_id, start, minutes, qos="normal"):
    end = start + timedelta(minutes=minutes)
    SlurmJob.objects.create(
        cluster=cluster, job_id=job_id, submitted_at=start, started_at=start, ended_at=end,
        state="COMPLETED", account=account, user="u", qos=qos, nodes=gpu.node.hostname,
        gpu_tres="gres/gpu:h100=1", gpus=1)
    SlurmJobGpu.objects.create(
        cluster=cluster, job_id=job_id, node=gpu.node.hostname, gpu_index=gpu.index, gpu=gpu,
        account=account, user="u", first_seen_at=start, last_seen_at=end)


def _kube_ran(cluster, gpu, namespace, pod, start, minutes, qos=""):
    """Pods have no QOS: a borrower is known by the loan alone."""
    for minute in range(minutes):
        at = start + timedelta(minutes=minute)
        ProcessRecord.objects.create(
            gpu=gpu, window_start=at, window_end=at + timedelta(minutes=1), pid=sum(map(ord, pod)),
            pid_start=1,
            job_source=ProcessRecord.JobSource.KUBERNETES, job_account=namespace, job_id=pod,
            received_at=at)


def _situation(scheduler, kind, ran, admin, teams):
    """Team vision reserves GPU 0 of one node; what ran on the cluster."""
    cluster = ClusterFactory(slug=scheduler, name=scheduler, scheduler=scheduler)
    node = NodeFactory(cluster=cluster, hostname=f"{scheduler}-n1")
    gpus = [make_gpu(node=node, gpu_class=teams["class"], index=i) for i in range(2)]
    for slug in ("vision", "speech"):
        ClusterIdentityFactory(cluster=cluster, kind=kind, key=slug, user=None, team=teams[slug])
    reservation = Reservation.objects.create(
        team=teams["vision"], gpu_class=teams["class"], count=1, start=START, end=END,
        status=Reservation.Status.ACTIVE, requested_by=admin, requested_at=START)
    assignment = Assignment.objects.create(reservation=reservation, gpu=gpus[0],
                                           assigned_from=START, assigned_until=END)
    ReservationBinding.objects.create(reservation=reservation, level="quota", why="test",
                                      updated_at=START)
    Loan.objects.create(assignment=assignment, gpu=gpus[0], lent_from=datetime(
        2026, 12, 8, tzinfo=UTC), returned_at=datetime(2026, 12, 9, tzinfo=UTC),
        end_reason=Loan.EndReason.OWNER_ASK)
    ran(cluster, gpus[0], "speech", "other-1", datetime(2026, 12, 5, 9, tzinfo=UTC), 3)  # foreign
    ran(cluster, gpus[0], "vision", "own-1", datetime(2026, 12, 5, 9, tzinfo=UTC), 3)  # its own
    ran(cluster, gpus[1], "speech", "other-2", datetime(2026, 12, 5, 9, tzinfo=UTC), 3)  # free GPU
    ran(cluster, gpus[0], "speech", "other-3", datetime(2026, 11, 30, 21, tzinfo=UTC), 3)  # Nov
    ran(cluster, gpus[0], "speech", "other-4", datetime(2026, 11, 30, 18, tzinfo=UTC), 3)  # before
    ran(cluster, gpus[0], "speech", "other-5", datetime(2026, 12, 10, 13, tzinfo=UTC), 3)  # after
    borrower = LENDING_ACCOUNT if scheduler == "slurm" else "speech"  # the loan's borrower
    ran(cluster, gpus[0], borrower, "lent-1", datetime(2026, 12, 8, 9, tzinfo=UTC), 3,
        qos=SCAVENGER_QOS)
    return cluster, reservation


def test_the_same_situation_gives_the_same_foreign_use_on_slurm_and_on_kubernetes():
    admin = AdminFactory(username="root")
    teams = {slug: TeamFactory(name=slug.title(), slug=slug) for slug in ("vision", "speech")}
    teams["class"] = GpuClassFactory(name="H100-80GB")
    built = [
        _situation(Cluster.Scheduler.SLURM, ClusterIdentity.Kind.SLURM_ACCOUNT, _slurm_ran,
                   admin, teams),
        _situation(Cluster.Scheduler.KUBERNETES, ClusterIdentity.Kind.K8S_NAMESPACE,
                   _kube_ran, admin, teams),
    ]
    seen = {}
    for cluster, reservation in built:
        backend = backend_class(cluster)
        for name, period in (("december", DECEMBER), ("november", NOVEMBER)):
            uses = backend.foreign_use(clusters=[cluster], period=period)
            assert set(uses) == set(foreign_use(period=period, cluster=cluster))  # the one entry
            seen[(cluster.scheduler, name)] = [
                (u.reservation.pk == reservation.pk, u.account, u.using_team, u.job,
                 u.first_seen, u.last_seen, u.reserving_team) for u in uses]
        assert foreign_use(period=DECEMBER, cluster=cluster, team=teams["speech"]) == []
        assert len(foreign_use(period=DECEMBER, cluster=cluster, team=teams["vision"])) == 1
    five = datetime(2026, 12, 5, 9, tzinfo=UTC)
    thirty = datetime(2026, 11, 30, 21, tzinfo=UTC)
    for scheduler in ("slurm", "kubernetes"):
        assert seen[(scheduler, "december")] == [
            (True, "speech", "speech", "other-1", five, five + timedelta(minutes=3), "vision")]
        assert seen[(scheduler, "november")] == [
            (True, "speech", "speech", "other-3", thirty, thirty + timedelta(minutes=3),
             "vision")]
    # The statements' review counts the same uses, per cluster, linking the same month.
    assert [(c.cluster, c.count, c.url) for c in foreign_use_by_cluster(period=DECEMBER)] == [
        ("kubernetes", 1, "/kubernetes/kubernetes/?month=2026-12"),
        ("slurm", 1, "/schedulers/slurm/?month=2026-12")]
