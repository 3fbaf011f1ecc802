"""The demo on the project's dev Slurm cluster (`manage.py slurm_demo`, `make demo SLURM=1`):
the cluster `gqdev` of deploy/slurm/dev-cluster seeded beside the demo organisation, so a
reservation made in the web pages becomes a Slurm reservation and account limit, real
`sbatch` jobs pend or run as it says, a lent GPU runs a scavenger job that the owner's job
preempts, and Slurm's accounting shows on the team page.

Its GPUs are H100s priced and reserved as a class of their own, `H100-80GB-gqdev`: a class
is what a lead reserves, so a reservation made in the web pages lands on the dev cluster,
never on the organisation's other H100 nodes (with one class, the tightest free node wins,
which may be any of them).

Jobs run as real users of this host: slurmd starts them as their user. The demo's leads
are mapped to system users every Debian host has (`LEAD_UNIX_USERS`), so nobody is created;
the members have no unix identity on the dev cluster.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction

from accounts.models import ClusterIdentity, Team, User
from agent.simulator import MODELS as SIMULATED_MODELS
from gpuquota.core.timeutil import hour_floor
from gpuquota.demo.organisation import CLASSES, DEMO_EPOCH, TEAMS, DemoNode, demo_gpu_uuid
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, Node
from gpuquota.inventory.services import gpu_reclassify, gpu_register
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota
from gpuquota.schedulers.models import ManagedObject
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.options import LENDING_ACCOUNT, SCAVENGER_QOS


def _load_devcluster():
    path = Path(settings.BASE_DIR) / "deploy/slurm/dev-cluster/devcluster.py"
    spec = importlib.util.spec_from_file_location("devcluster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: deploy/slurm/dev-cluster/devcluster.py (a script, not a package): DevCluster, its nodes.
devcluster = _load_devcluster()

CLUSTER = devcluster.CLUSTER
MODEL_CLASS = "H100-80GB"  # what the GPUs are (the simulated agents' model)
GPU_CLASS = f"{MODEL_CLASS}-{CLUSTER}"  # what they are reserved and priced as
#: team -> its quota of the dev cluster's class.
QUOTAS = {"vision": 4, "nlp": 4}
PACKAGES = "slurmctld slurmd slurmdbd slurm-client munge mariadb-server"
#: demo login -> the system user its jobs run as on the dev cluster.
LEAD_UNIX_USERS = {"vision-lead": "daemon", "speech-lead": "bin", "robotics-lead": "sys",
                   "nlp-lead": "nobody"}
#: The team that reserves in the walk-through and the one whose job pends meanwhile (both
#: have an H100 quota, so neither is held back by its account limit alone).
OWNER, OTHER = "vision", "nlp"


def slurm_demo_unavailable() -> str | None:
    """Why the dev cluster cannot start on this host, or None."""
    missing = devcluster.missing_binaries()
    if missing:
        return (f"The dev Slurm cluster needs Debian's Slurm, munge and MariaDB: missing "
                f"{', '.join(missing)} (apt-get install {PACKAGES}).")
    if os.geteuid() != 0:
        return "The dev Slurm cluster needs root: slurmd runs jobs as their users."
    return None


def slurm_demo_dir() -> Path:
    """Where the dev cluster keeps its state: under the temporary directory, which every
    user can enter (jobs run as other users and reach munge's socket there), one per
    GQ_SLURM_PORT_BASE so two checkouts' clusters never share one."""
    return Path(tempfile.gettempdir()) / f"gq-slurm-demo-{devcluster.PORT_BASE}"


def slurm_demo_nodes() -> list[DemoNode]:
    """The dev cluster's nodes for the demo's simulated agents: GPUs idle until a Slurm job
    runs on them (the prolog's records, `gpu-jobs/<node>`, say which; the epilog removes
    them), so the lending policy lends only the GPUs no job uses; the leads' unix users and
    the teams' accounts."""
    return [DemoNode(CLUSTER, node, MODEL_CLASS, gpus=devcluster.GPUS_PER_NODE,
                     profiles=",".join(["idle"] * devcluster.GPUS_PER_NODE),
                     users=",".join(LEAD_UNIX_USERS.values()), accounts=",".join(TEAMS),
                     gpu_jobs_dir=str(slurm_demo_dir() / "gpu-jobs" / node))
            for node in devcluster.NODES]


def _seed_class() -> GpuClass:
    model_name, reserved, on_demand, borrowed = CLASSES[MODEL_CLASS]
    gpu_class, _ = GpuClass.objects.get_or_create(
        name=GPU_CLASS, defaults={"description": f"{model_name} on the dev Slurm cluster"})
    RateCard.objects.get_or_create(gpu_class=gpu_class, valid_from=DEMO_EPOCH, defaults={
        "reserved_rate": Decimal(reserved), "on_demand_rate": Decimal(on_demand),
        "borrowed_rate": Decimal(borrowed)})
    for team in Team.objects.filter(slug__in=QUOTAS):
        Quota.objects.get_or_create(team=team, gpu_class=gpu_class, valid_from=DEMO_EPOCH,
                                    defaults={"gpus": QUOTAS[team.slug]})
    return gpu_class


def _seed_inventory(*, gpu_class: GpuClass, now: datetime) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(
        slug=CLUSTER, defaults={"name": f"{CLUSTER} (dev Slurm)",
                                "scheduler": Cluster.Scheduler.SLURM})
    model_name = CLASSES[MODEL_CLASS][0]
    for demo in slurm_demo_nodes():
        node, _ = Node.objects.get_or_create(cluster=cluster, hostname=demo.hostname)
        for index in range(demo.gpus):
            uuid = demo_gpu_uuid(demo.hostname, index)
            if Gpu.objects.filter(uuid=uuid).exists():
                continue
            # In service from the hour's start, so a reservation "from now" typed to the
            # minute finds it; registered as its model's class, then priced as the dev
            # cluster's a second later.
            gpu = gpu_register(node=node, uuid=uuid, model_name=model_name,
                               at=hour_floor(now) - timedelta(seconds=1), index=index,
                               pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                               memory_total_bytes=SIMULATED_MODELS[model_name][0])
            gpu_reclassify(gpu=gpu, gpu_class=gpu_class, at=hour_floor(now))
    return cluster


def _seed_identities(cluster: Cluster) -> None:
    for team in Team.objects.filter(slug__in=TEAMS):
        ClusterIdentity.objects.get_or_create(
            cluster=cluster, kind=ClusterIdentity.Kind.SLURM_ACCOUNT, key=team.slug,
            valid_from=DEMO_EPOCH, defaults={"team": team})
    for user in User.objects.filter(username__in=LEAD_UNIX_USERS):
        ClusterIdentity.objects.get_or_create(
            cluster=cluster, kind=ClusterIdentity.Kind.UNIX_USER,
            key=LEAD_UNIX_USERS[user.username], valid_from=DEMO_EPOCH, defaults={"user": user})


@transaction.atomic
def slurm_demo_seed(*, slurm_conf: str, now: datetime) -> Cluster:
    """The dev cluster in the demo organisation (run `seed_demo` first): its two nodes of
    four H100 GPUs (the UUIDs the simulated agents report) in the class `GPU_CLASS`, with
    its rates and quotas; the demo teams' Slurm accounts and their leads' unix users on it;
    and its backend (mode write) reading `slurm_conf`. Safe to run again: only the path is
    updated (and audited) when it moved; a reconcile follows the commit. The dev cluster
    starts empty each time, so what gpuquota wrote into the last one is forgotten: it went
    with that cluster, and is not drift to report."""
    cluster = _seed_inventory(gpu_class=_seed_class(), now=now)
    _seed_identities(cluster)
    ManagedObject.objects.filter(cluster=cluster).delete()
    admin = User.objects.filter(is_staff=True, is_active=True).order_by("id").first()
    backend_config_update(cluster=cluster, actor=admin, mode="write",
                          options={"slurm_conf": slurm_conf, "cluster_name": CLUSTER})
    return cluster


@dataclass(frozen=True)
class DemoJob:
    what: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def _sbatch(login: str, account: str, gpus: int, *extra: str, srun: bool = False) -> tuple:
    wrap = "srun sleep 3600" if srun else "sleep 3600"
    return ("sbatch", f"--uid={LEAD_UNIX_USERS[login]}", f"--account={account}",
            f"--gres=gpu:{devcluster.GPU_TYPE}:{gpus}", *extra, "--chdir=/tmp",
            "--output=/dev/null", "--wrap", wrap)


def slurm_demo_jobs() -> list[DemoJob]:
    """The walk-through's jobs (docs/slurm.md, "The demo on the dev cluster"), in order,
    for a reservation of one node's four GPUs by the owner's lead."""
    owner, other = f"{OWNER}-lead", f"{OTHER}-lead"
    node = devcluster.NODES[0]
    return [
        DemoJob(f"{OWNER}'s job, drawn into its reservation: runs", _sbatch(owner, OWNER, 3)),
        DemoJob(f"{OTHER}'s job on the reserved node: pends", _sbatch(
            other, OTHER, 1, f"--nodelist={node}")),
        # On the lent node (a free one would do too), and short: Slurm keeps the free GPU
        # for the other team's pending job unless this one ends before that could start.
        DemoJob(f"a borrower's job on the lent GPU of {node} (once lent): runs", _sbatch(
            other, LENDING_ACCOUNT, 1, f"--qos={SCAVENGER_QOS}", f"--nodelist={node}",
            "--time=30", srun=True)),
        # On the lent node: with a free node elsewhere, Slurm may start it there once it has
        # preempted the borrower.
        DemoJob(f"{OWNER}'s job that takes the GPU back: the borrower's is requeued",
                _sbatch(owner, OWNER, 1, f"--nodelist={node}")),
    ]
