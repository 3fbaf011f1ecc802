"""A Kubernetes cluster in gpuquota (two teams, their namespaces, two nodes of GPUs) and the
fake API server it reconciles against, limited by the shipped ClusterRole and Role."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from accounts.models import ClusterIdentity
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.schedulers.services import backend_config_update
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    ClusterIdentityFactory,
    GpuClassFactory,
    NodeFactory,
    TeamFactory,
    make_gpu,
)
from tests.kubernetes.fake_apiserver import FakeApiServer, dra

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
TOKEN = "sa-token-for-tests"
RBAC = Path(settings.BASE_DIR) / "deploy" / "kubernetes" / "base" / "rbac.yaml"
KUEUE_RBAC = Path(settings.BASE_DIR) / "deploy" / "kubernetes" / "kueue" / "rbac.yaml"


def shipped_rules() -> list[dict]:
    role = next(d for d in yaml.safe_load_all(RBAC.read_text())
                if d and d["kind"] == "ClusterRole")
    return role["rules"]


def shipped_roles() -> dict[str, list[dict]]:
    """The shipped Roles' rules per namespace (reading Kueue's controller Deployment)."""
    return {d["metadata"]["namespace"]: d["rules"]
            for d in yaml.safe_load_all(KUEUE_RBAC.read_text()) if d and d["kind"] == "Role"}


class KubeSite:
    """Cluster `kube` (Kubernetes): teams vision (namespaces vision, vision-dev) and speech
    (speech); nodes gpu-a and gpu-b with 4 H100s each."""

    def __init__(self):
        self.cluster = ClusterFactory(slug="kube", name="kube",
                                      scheduler=Cluster.Scheduler.KUBERNETES)
        self.gpu_class = GpuClassFactory(name="H100-80GB")
        self.gpus = {}
        for hostname in ("gpu-a", "gpu-b"):
            node = NodeFactory(cluster=self.cluster, hostname=hostname)
            self.gpus[hostname] = [make_gpu(node=node, gpu_class=self.gpu_class, index=i)
                                   for i in range(4)]
        self.admin = AdminFactory(username="root")
        self.teams = {}
        for slug, namespaces in (("vision", ("vision", "vision-dev")), ("speech", ("speech",))):
            team = TeamFactory(name=slug.title(), slug=slug)
            for namespace in namespaces:
                ClusterIdentityFactory(cluster=self.cluster, key=namespace, user=None, team=team,
                                       kind=ClusterIdentity.Kind.K8S_NAMESPACE)
            self.teams[slug] = team

    def configure(self, server: FakeApiServer, **options) -> None:
        backend_config_update(cluster=self.cluster, actor=self.admin, token=server.token,
                              api_url=server.url, options=options)

    def reserve(self, team: str, gpus, *, start=NOW - timedelta(hours=1),
                end=NOW + timedelta(hours=2)) -> Reservation:
        reservation = Reservation.objects.create(
            team=self.teams[team], gpu_class=self.gpu_class, count=len(gpus), start=start,
            end=end, status=Reservation.Status.ACTIVE, requested_by=self.admin,
            requested_at=start)
        for gpu in gpus:
            Assignment.objects.create(reservation=reservation, gpu=gpu, assigned_from=start,
                                      assigned_until=end)
        return reservation

    def lend(self, reservation: Reservation, gpu, *, at=NOW) -> Loan:
        assignment = Assignment.objects.get(reservation=reservation, gpu=gpu)
        return Loan.objects.create(assignment=assignment, gpu=gpu, lent_from=at)


@pytest.fixture
def kube(db):
    return KubeSite()


@pytest.fixture
def apiserver():
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(),
                           rbac_roles=shipped_roles()).start()
    yield server
    server.stop()


def gpu_slice(node: str, gpus) -> dict:
    """The ResourceSlice the NVIDIA DRA driver publishes for `node`: devices `gpu-<index>`
    with the GPU's NVML UUID as attribute `uuid` (its pool is the node's name)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{g.index}", "attributes": {
                         "uuid": {"string": g.uuid}, "index": {"int": g.index}}}
                         for g in gpus]}}


def dra_server(*, version: str = "v1.37.0", runtime_config=frozenset(),
               slices=()) -> FakeApiServer:
    """A started fake of Kubernetes `version` with the NVIDIA DRA driver publishing `slices`
    (default: one empty slice on gpu-a), limited by the shipped ClusterRole and Role."""
    server = FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                           version=version, runtime_config=set(runtime_config)).start()
    for resource_slice in slices or [gpu_slice("gpu-a", [])]:
        server.put(resource_slice)
    return server


def claim_on(server, gpu, name: str, pod: str) -> None:
    """speech's claim for `gpu` (by UUID), allocated by the fake's allocator for `pod`."""
    server.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "speech"},
                "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                    "count": 1, "selectors": [{"cel": {"expression": (
                        f"device.attributes['gpu.nvidia.com'].uuid == '{gpu.uuid}'")}}]}}]}}})
    assert dra.allocate(server, "speech", name, pod=pod)
