import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accounts.models import ClusterIdentity, Membership
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Assignment, Reservation
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    ClusterIdentityFactory,
    GpuClassFactory,
    MembershipFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class Site:
    """One Slurm cluster, two nodes of `gpus_per_node` GPUs, two teams with a Slurm account
    and a member each."""

    def __init__(self, *, gpus_per_node=4, nodes=("node-a", "node-b"), class_name="H100-80GB"):
        self.cluster = ClusterFactory(slug="dev", name="dev", scheduler=Cluster.Scheduler.SLURM)
        self.gpu_class = GpuClassFactory(name=class_name)
        self.nodes = [NodeFactory(cluster=self.cluster, hostname=h) for h in nodes]
        self.gpus = {
            node.hostname: [make_gpu(node=node, gpu_class=self.gpu_class, index=i)
                            for i in range(gpus_per_node)]
            for node in self.nodes
        }
        self.admin = AdminFactory(username="root")
        self.teams = {}
        for slug, user in (("vision", "alice"), ("speech", "bob")):
            team = TeamFactory(name=slug.title(), slug=slug)
            member = UserFactory(username=user)
            MembershipFactory(user=member, team=team, role=Membership.Role.LEAD)
            ClusterIdentityFactory(cluster=self.cluster, kind=ClusterIdentity.Kind.UNIX_USER,
                                   key=user, user=member)
            ClusterIdentityFactory(cluster=self.cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                                   key=slug, user=None, team=team)
            self.teams[slug] = team

    def reserve(self, team: str, gpus, *, start=NOW - timedelta(hours=1),
                end=NOW + timedelta(hours=2), status=Reservation.Status.ACTIVE) -> Reservation:
        """A held reservation with exactly these GPUs assigned (written directly: the
        reservation services' choice of GPUs is theirs to test)."""
        reservation = Reservation.objects.create(
            team=self.teams[team], gpu_class=self.gpu_class, count=len(gpus), start=start,
            end=end, status=status, requested_by=self.admin, requested_at=start,
        )
        for gpu in gpus:
            Assignment.objects.create(reservation=reservation, gpu=gpu, assigned_from=start,
                                      assigned_until=end)
        return reservation


@pytest.fixture
def site(db):
    return Site()


@pytest.fixture
def memory_backend(site, monkeypatch):
    """The site's cluster served by the in-memory scheduler (backend_memory), emptied."""
    from gpuquota.schedulers import backend as backend_module
    from tests.schedulers import backend_memory as mem

    monkeypatch.setitem(backend_module.BACKENDS, "slurm",
                        "tests.schedulers.backend_memory.MemoryBackend")
    mem.STORE.clear()
    mem.FAIL_ON.clear()
    mem.DOWN[0] = False
    return site


@pytest.fixture
def memory(memory_backend):
    """The same, with the cluster's backend configured (writes on)."""
    from gpuquota.schedulers.services import backend_config_update

    backend_config_update(cluster=memory_backend.cluster, actor=memory_backend.admin)
    return memory_backend


def pytest_collection_modifyitems(config, items):
    from tests.schedulers.slurm_cluster import unavailable_reason

    marked = [item for item in items if "slurm" in item.keywords]
    reason = unavailable_reason() if marked else None
    for item in marked:
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def dev_slurm():
    """The dev Slurm cluster, started once for the session (in a directory every user can
    enter: jobs run as other users and reach munge's socket)."""
    from tests.schedulers.slurm_cluster import Live, devcluster

    root = Path(tempfile.mkdtemp(prefix="gq-slurm-"))
    cluster = devcluster.DevCluster(root)
    cluster.start()
    try:
        yield Live(cluster)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def live(dev_slurm, db):
    """The dev cluster with no job left from an earlier test."""
    dev_slurm.cancel_all()
    yield dev_slurm
    dev_slurm.cancel_all()
