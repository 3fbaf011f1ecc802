"""The lending simulation's fleet (`bench.lending`): nodes, teams and their Slurm accounts,
quotas, a rate card and the workload's reservations, booked through the product's services;
and the node agents, whose one-minute samples, processes and XID events go in batches
through the product's ingestion service, as an agent would send them."""

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bench.workloads import Workload

GIB = 2**30
NAMESPACE = uuid.UUID("0c6b2f0e-8d3a-4b57-9f61-3e1a7c5d2b90")
BORROWER_ACCOUNTS = ("borrow-a", "borrow-b")
CLASS_NAME, MODEL_NAME = "H100-80GB", "NVIDIA H100 80GB HBM3"


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Booked:
    """A reservation of the workload as booked: its id, end and GPUs (by index k)."""

    plan_index: int
    reservation_id: int
    start: datetime
    end: datetime
    gpu_ids: list[int]
    lendable: bool


@dataclass
class Fleet:
    gpu_class: object
    admin: object
    gpus: list  # inventory.Gpu, in node order
    node_of: dict[int, object]  # gpu id -> Node
    teams: list
    booked: list[Booked] = field(default_factory=list)
    refused: int = 0


def fleet_build(workload: Workload, *, t0: datetime) -> Fleet:
    """Nodes (Slurm cluster), the reserving teams and two borrowing teams, each mapped from
    its Slurm account, quotas as large as the fleet, a rate card, an admin."""
    import uuid as uuidlib

    from accounts.models import ClusterIdentity, Team, User
    from gpuquota.inventory.models import Cluster, GpuClass, GpuModelMapping, Node
    from gpuquota.inventory.services import gpu_register
    from gpuquota.rates.models import RateCard
    from gpuquota.reservations.models import Quota

    before = t0 - timedelta(days=1)
    gpu_class = GpuClass.objects.create(name=CLASS_NAME)
    GpuModelMapping.objects.create(model_name=MODEL_NAME, gpu_class=gpu_class)
    cluster = Cluster.objects.create(name="sim", slug="sim", scheduler=Cluster.Scheduler.SLURM)
    gpus, node_of = [], {}
    for n in range(workload.nodes):
        node = Node.objects.create(cluster=cluster, hostname=f"sim-{n:02d}")
        for i in range(workload.gpus_per_node):
            gpu = gpu_register(node=node, uuid=f"GPU-{uuidlib.uuid4()}", model_name=MODEL_NAME,
                               at=before, index=i)
            gpu.node = node
            gpus.append(gpu)
            node_of[gpu.id] = node
    slugs = [f"team-{i}" for i in range(workload.teams)] + list(BORROWER_ACCOUNTS)
    teams = []
    for slug in slugs:
        team = Team.objects.create(name=slug.replace("-", " ").title(), slug=slug)
        ClusterIdentity.objects.create(cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT,
                                       key=slug, team=team, valid_from=before)
        Quota.objects.create(team=team, gpu_class=gpu_class, gpus=len(gpus), valid_from=before)
        teams.append(team)
    RateCard.objects.create(gpu_class=gpu_class, valid_from=before,
                            reserved_rate=Decimal("2.50"), on_demand_rate=Decimal("3"),
                            borrowed_rate=Decimal("1.50"))
    admin = User.objects.create(username="sim-admin", is_staff=True, is_superuser=True)
    return Fleet(gpu_class=gpu_class, admin=admin, gpus=gpus, node_of=node_of, teams=teams)


def reservations_book(fleet: Fleet, workload: Workload, *, t0: datetime) -> None:
    """Every reservation booked at t0 through the reservation service, earliest first; one
    the service cannot place (no room) is counted in `refused` and left out."""
    from gpuquota.core.errors import DomainError
    from gpuquota.reservations.services import reservation_create

    order = sorted(range(len(workload.reservations)),
                   key=lambda i: (workload.reservations[i].start_h, i))
    for i in order:
        plan = workload.reservations[i]
        start = t0 + timedelta(hours=plan.start_h)
        end = start + timedelta(hours=plan.hours)
        try:
            r = reservation_create(team=fleet.teams[plan.team], gpu_class=fleet.gpu_class,
                                   count=plan.count, start=start, end=end,
                                   requested_by=fleet.admin, purpose=f"sim {plan.kind} #{i}",
                                   now=t0)
        except DomainError:
            fleet.refused += 1
            continue
        gpu_ids = sorted(r.assignments.values_list("gpu_id", flat=True))
        if len(gpu_ids) < plan.count:
            fleet.refused += 1
            continue
        fleet.booked.append(Booked(i, r.id, start, end, gpu_ids, plan.lendable))


class Agents:
    """One agent per node: collects each GPU's one-minute sample and processes, and sends
    what it collected as one batch through `batch_ingest` when flushed."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.pending: dict[int, dict] = {}  # node id -> {"samples", "processes", "events"}
        self.boot: dict[int, int] = {}
        self.flushes = 0
        self.uuid_of = {g.id: g.uuid for g in fleet.gpus}

    def _node_pending(self, gpu_id: int) -> dict:
        node = self.fleet.node_of[gpu_id]
        return self.pending.setdefault(node.id, {"samples": [], "processes": [], "events": []})

    def minute(self, gpu_id: int, start: datetime, util: float, memory_bytes: int,
               accounts: list[tuple[str, int]]) -> None:
        """One GPU's sample of [start, start + 60 s) and a process record per account."""
        gpu_uuid, end = self.uuid_of[gpu_id], iso(start + timedelta(seconds=60))
        batch = self._node_pending(gpu_id)
        batch["samples"].append({
            "seq": 1, "gpu_uuid": gpu_uuid, "window_start": iso(start), "window_end": end,
            "readings": 6, "util_gpu_avg": round(util, 2), "util_gpu_max": min(100.0, util + 3),
            "memory_used_bytes_avg": memory_bytes, "memory_used_bytes_max": memory_bytes,
            "ecc_uncorrected": 0, "ecc_corrected": 0})
        for n, (account, memory) in enumerate(accounts):
            batch["processes"].append({
                "gpu_uuid": gpu_uuid, "window_start": iso(start), "window_end": end,
                "pid": 1000 + n, "pid_start": 1, "uid": 2000, "user": account,
                "command": "python", "job": {"source": "slurm", "id": f"{account}-{n}",
                                             "account": account},
                "memory_used_bytes_max": memory})

    def xid(self, gpu_id: int, at: datetime) -> None:
        self._node_pending(gpu_id)["events"].append({
            "event_id": str(uuid.uuid5(NAMESPACE, f"{gpu_id}:{at.isoformat()}:xid")),
            "gpu_uuid": self.uuid_of[gpu_id], "ts": iso(at), "type": "xid", "xid": 79,
            "detail": "GPU has fallen off the bus"})

    def reboot(self, node_id: int) -> None:
        self.boot[node_id] = self.boot.get(node_id, 0) + 1

    def flush(self, *, now: datetime) -> int:
        """Send every node's collected records as one batch each; returns batches sent."""
        from gpuquota.ingest.batches import batch_ingest
        from gpuquota.ingest.protocol import batch_check

        sent = 0
        nodes = {n.id: n for n in self.fleet.node_of.values()}
        for node_id, records in self.pending.items():
            if not any(records.values()):
                continue
            self.flushes += 1
            boot = f"sim-boot-{self.boot.get(node_id, 0)}"
            body = {"schema_version": 1, "sent_at": iso(now),
                    "batch_id": str(uuid.uuid5(NAMESPACE, f"{node_id}:{self.flushes}")),
                    "agent_instance_id": str(uuid.uuid5(NAMESPACE, f"{node_id}:{boot}")),
                    "seq_first": self.flushes, "seq_last": self.flushes,
                    "node": {"hostname": nodes[node_id].hostname, "agent_version": "sim",
                             "boot_id": boot, "spool_backlog": 0, "dropped_records_total": 0},
                    "gpus": [], **records}
            batch_ingest(node=nodes[node_id], body=batch_check(body), now=now, check_age=False)
            sent += 1
        self.pending = {}
        return sent
