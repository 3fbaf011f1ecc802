"""The demo organisation: what `manage.py seed_demo` creates, idempotently.

Two clusters, 12 nodes of 8 GPUs across three classes, four teams with leads and
members, cluster identities, quotas and rate cards. The GPUs' UUIDs are the ones
the agent's simulator reports for the same hostname and index, so simulated
agents and seeded reservations meet on the same GPUs.
"""

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.db import transaction

from accounts.models import ClusterIdentity, Membership, Team, User
from agent.simulator import MODELS as SIMULATED_MODELS
from agent.simulator import simulated_uuid
from gpuquota.ingest.services import node_token_rotate
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuModelMapping, Node
from gpuquota.inventory.services import gpu_register
from gpuquota.rates.models import ClusterEnergyFactor, RateCard
from gpuquota.reservations.models import Quota

DEMO_PASSWORD = "demo"
DEMO_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
GPUS_PER_NODE = 8

CLASSES = {
    # class: (NVML model name, reserved rate, on-demand rate, borrowed rate)
    "H100-80GB": ("NVIDIA H100 80GB HBM3", "2.50", "3.00", "1.50"),
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", "1.40", "1.70", "0.85"),
    "L4": ("NVIDIA L4", "0.60", "0.80", "0.40"),
}

CLUSTERS = {
    # slug: (name, scheduler, [(hostname prefix, class, node count)])
    "ada": (
        "Ada (Slurm)",
        Cluster.Scheduler.SLURM,
        [("ada-h100", "H100-80GB", 4), ("ada-a100", "A100-40GB", 4)],
    ),
    "turing": ("Turing (Kubernetes)", Cluster.Scheduler.KUBERNETES, [("turing-l4", "L4", 4)]),
}

TEAMS = {
    # slug: (name, cost center, {class: quota}, member first names)
    "vision": ("Vision", "CC-4100", {"H100-80GB": 8, "A100-40GB": 4}, ["alice", "arjun"]),
    "speech": ("Speech", "CC-4200", {"A100-40GB": 8, "L4": 4}, ["bruno", "bea"]),
    "robotics": ("Robotics", "CC-4300", {"L4": 8, "H100-80GB": 4}, ["chen", "carla"]),
    "nlp": ("NLP", "CC-4400", {"H100-80GB": 8, "L4": 4}, ["dmitri", "dana"]),
}
SURNAMES = {
    "alice": "Martin",
    "arjun": "Rao",
    "bruno": "Costa",
    "bea": "Lindqvist",
    "chen": "Wei",
    "carla": "Moreno",
    "dmitri": "Volkov",
    "dana": "Okafor",
}

DEMO_SEED = 0
# The simulated agents' GPU behaviours (agent/simulator.py): one node keeps the simulator's
# default mix, with a GPU lost with XID 79 and a MIG one; the others run a steady mix.
FAULTY_NODE = "ada-h100-01"
HEALTHY_PROFILES = "training,inference,training,notebook,idle,inference,training,idle"


def demo_gpu_uuid(hostname: str, index: int) -> str:
    """The UUID the agent's simulator reports for GPU `index` of `hostname`."""
    return simulated_uuid("GPU", DEMO_SEED, hostname, index)


@dataclass(frozen=True)
class DemoNode:
    cluster: str
    hostname: str
    gpu_class: str
    gpus: int = GPUS_PER_NODE
    #: Its simulated agent's GPU profiles, unix users and accounts (comma-separated);
    #: empty: the organisation's (HEALTHY_PROFILES, the demo people, the teams).
    profiles: str = ""
    users: str = ""
    accounts: str = ""
    #: Where a real Slurm's prolog records which job each of its GPUs runs (the dev
    #: cluster's): its agent shows those jobs, and the demo's made-up borrowers never.
    gpu_jobs_dir: str = ""

    @property
    def model_name(self) -> str:
        return CLASSES[self.gpu_class][0]


def demo_nodes() -> list[DemoNode]:
    """Every demo node, in a stable order."""
    return [
        DemoNode(slug, f"{prefix}-{n:02d}", gpu_class)
        for slug, (_, _, groups) in CLUSTERS.items()
        for prefix, gpu_class, count in groups
        for n in range(1, count + 1)
    ]


#: Per demo cluster: PUE and g CO2e per kWh (docs/budgets.md, Energy).
ENERGY_FACTORS = {"ada": ("1.35", "380"), "turing": ("1.20", "120")}


def _user(username: str, *, staff: bool = False, first: str = "", last: str = "") -> User:
    user, created = User.objects.get_or_create(
        username=username,
        defaults={
            "email": f"{username}@example.org",
            "is_staff": staff,
            "is_superuser": staff,
            "first_name": first,
            "last_name": last,
        },
    )
    if created:
        user.set_password(DEMO_PASSWORD)
        user.save(update_fields=["password"])
    return user


def _seed_inventory() -> dict[str, GpuClass]:
    classes = {}
    for name, (model, reserved, on_demand, borrowed) in CLASSES.items():
        gpu_class, _ = GpuClass.objects.get_or_create(name=name, defaults={"description": model})
        GpuModelMapping.objects.get_or_create(model_name=model, defaults={"gpu_class": gpu_class})
        RateCard.objects.get_or_create(
            gpu_class=gpu_class,
            valid_from=DEMO_EPOCH,
            defaults={"reserved_rate": Decimal(reserved), "on_demand_rate": Decimal(on_demand),
                      "borrowed_rate": Decimal(borrowed)},
        )
        classes[name] = gpu_class
    clusters = {
        slug: Cluster.objects.get_or_create(slug=slug, defaults={"name": name, "scheduler": sched})[
            0
        ]
        for slug, (name, sched, _) in CLUSTERS.items()
    }
    for slug, (pue, intensity) in ENERGY_FACTORS.items():  # the statements' CO2e
        ClusterEnergyFactor.objects.get_or_create(
            cluster=clusters[slug], valid_from=DEMO_EPOCH,
            defaults={"pue": Decimal(pue), "carbon_intensity": Decimal(intensity),
                      "source": "Demo: a static annual grid average"})
    for demo in demo_nodes():
        node, _ = Node.objects.get_or_create(cluster=clusters[demo.cluster], hostname=demo.hostname)
        for index in range(GPUS_PER_NODE):
            gpu_uuid = demo_gpu_uuid(demo.hostname, index)
            if not Gpu.objects.filter(uuid=gpu_uuid).exists():
                gpu_register(
                    node=node,
                    uuid=gpu_uuid,
                    model_name=demo.model_name,
                    at=DEMO_EPOCH,
                    index=index,
                    pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                    memory_total_bytes=SIMULATED_MODELS[demo.model_name][0],
                )
    return classes


def _seed_teams(classes: dict[str, GpuClass]) -> dict[str, list[str]]:
    logins: dict[str, list[str]] = {"admin": ["admin"]}
    _user("admin", staff=True, first="Platform", last="Admin")
    ada, turing = Cluster.objects.get(slug="ada"), Cluster.objects.get(slug="turing")
    for slug, (name, cost_center, quotas, people) in TEAMS.items():
        team, _ = Team.objects.get_or_create(
            slug=slug, defaults={"name": name, "cost_center": cost_center}
        )
        lead = _user(f"{slug}-lead", first=people[0].title(), last=SURNAMES[people[0]])
        member = _user(f"{slug}-member", first=people[1].title(), last=SURNAMES[people[1]])
        logins[slug] = [lead.username, member.username]
        for user, role in ((lead, Membership.Role.LEAD), (member, Membership.Role.MEMBER)):
            Membership.objects.get_or_create(
                user=user,
                team=team,
                valid_from=DEMO_EPOCH,
                defaults={"role": role, "is_billing": True},
            )
            for cluster in (ada, turing):
                ClusterIdentity.objects.get_or_create(
                    cluster=cluster,
                    kind=ClusterIdentity.Kind.UNIX_USER,
                    key=people[user is member],
                    valid_from=DEMO_EPOCH,
                    defaults={"user": user},
                )
        account_cluster, kind = (
            (ada, ClusterIdentity.Kind.SLURM_ACCOUNT)
            if slug in ("vision", "speech")
            else (turing, ClusterIdentity.Kind.K8S_NAMESPACE)
        )
        ClusterIdentity.objects.get_or_create(
            cluster=account_cluster,
            kind=kind,
            key=slug,
            valid_from=DEMO_EPOCH,
            defaults={"team": team},
        )
        for class_name, gpus in quotas.items():
            Quota.objects.get_or_create(
                team=team,
                gpu_class=classes[class_name],
                valid_from=DEMO_EPOCH,
                defaults={"gpus": gpus},
            )
    return logins


def demo_unix_users() -> list[str]:
    """The unix users simulated processes run as: the demo people's first names."""
    return [name for _, _, _, people in TEAMS.values() for name in people]


@transaction.atomic
def demo_organisation_seed() -> dict[str, list[str]]:
    """Create the demo organisation if missing; safe to run again. Returns the logins."""
    classes = _seed_inventory()
    return _seed_teams(classes)


def demo_agent_tokens_issue(
    *, directory: str, nodes: list[DemoNode] | None = None
) -> list[tuple[DemoNode, str]]:
    """A fresh token for every demo node (or each of `nodes`), written to
    `directory`/<hostname>.token (0600)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    issued = []
    for demo in demo_nodes() if nodes is None else nodes:
        node = Node.objects.get(cluster__slug=demo.cluster, hostname=demo.hostname)
        path = os.path.join(directory, f"{demo.hostname}.token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(node_token_rotate(node=node, actor=None).key + "\n")
        issued.append((demo, path))
    return issued
