"""Kubernetes with Kueue as `bench.fleet_scale_kueue` sees it: each cluster of the fleet a
Kubernetes cluster whose backend writes (mode `write`) to a fake API server of its own
(`tests.kubernetes.fake_apiserver`: Kueue 0.14's kinds and schemas, the shipped ClusterRole
and Role), each server in a forked process of its own so that its CPU is not the worker's.
Each server holds, besides Kueue's controller Deployment, what such a cluster runs at its
size:

- a pod per node in `gpu-operator` (the DCGM exporter: no GPU asked);
- on every node reserved now, a running 8-GPU pod of the reserving team (its namespace, its
  queue's label) and the Kueue Workload that admitted it; one Workload in 20 also carries a
  `Preempted` condition (reason `InCohortReclamation`) from two minutes ago;
- one node in 100 an evicted pod (node pressure), one in 200 a pod ended by the taint manager
  (`DisruptionTarget`, `DeletionByTaintManager`).

Every team has a namespace named after its slug on every cluster (as it has a Slurm account
in `bench.fleet_scale_slurm`); one open loan in 20 is marked returned five minutes ago (the
Workloads' reclamations free it).

With `Site(dra=True)` the servers are Kubernetes 1.37 (DRA and DeviceTaintRules in
`resource.k8s.io/v1`), every backend runs in the exact-GPU mode (`exact_gpus`), and each
server also holds, as the NVIDIA DRA driver and the scheduler leave them, a ResourceSlice per
node (its 8 GPUs, `gpu-<index>` with their UUIDs) and, for each reserved node's pod, the
ResourceClaim allocated that node's 8 GPUs (the returns read these).
"""

from __future__ import annotations

import multiprocessing
import secrets
from dataclasses import dataclass, field
from datetime import timedelta

from bench.fleet_scale_kube_objects import gpu_claim, gpu_slice, pod, stamp, workload
from bench.table_stats import TICK


@dataclass
class Site:
    """A fake API server per cluster slug, each in a forked process of its own (`fork`:
    the benches) or a thread of this one (a test, whose database transaction a fork would
    lose)."""

    fork: bool = True
    dra: bool = False  # Kubernetes 1.37, the NVIDIA DRA driver, the exact-GPU mode
    servers: dict[str, tuple[object, object, str]] = field(default_factory=dict)
    seeded: set[str] = field(default_factory=set)  # the hostnames whose pods were put
    loans_after: int = 0  # the loans up to this id were looked at for returns

    def start(self, slug: str, token: str, objects: list[dict]) -> str:
        """A server for cluster `slug` holding `objects`; its URL."""
        version = DRA_VERSION if self.dra else PLAIN_VERSION
        if not self.fork:
            server = _server(token, version)
            for obj in objects:
                server.put(obj)
            self.servers[slug] = (server, None, server.url)
            return server.url
        from django.db import connections

        connections.close_all()  # the child never uses the parent's connection
        ours, theirs = multiprocessing.get_context("fork").Pipe()
        process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(theirs, token, objects, version), daemon=True
        )
        process.start()
        self.servers[slug] = (process, ours, ours.recv())
        return self.servers[slug][2]

    def add(self, slug: str, objects: list[dict]) -> None:
        """Put `objects` on cluster `slug`'s server."""
        server, conn, _ = self.servers[slug]
        if conn is None:
            for obj in objects:
                server.put(obj)
        else:
            conn.send(objects)
            conn.recv()

    def cpu_s(self) -> float:
        """User + system CPU seconds of every API server process so far (0 in threads)."""
        total = 0.0
        for process, conn, _ in self.servers.values():
            if conn is None:
                continue
            with open(f"/proc/{process.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        return total

    def stop(self) -> None:
        for process, conn, _ in self.servers.values():
            if conn is None:
                process.stop()
                continue
            conn.send("stop")
            process.join(timeout=30)
        self.servers.clear()


PLAIN_VERSION, DRA_VERSION = "v1.34.2", "v1.37.0"


def _server(token: str, version: str):
    """A started fake of Kubernetes `version` limited by the shipped ClusterRole and Role."""
    from tests.kubernetes.conftest import shipped_roles, shipped_rules
    from tests.kubernetes.fake_apiserver import FakeApiServer

    server = FakeApiServer(
        token=token, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(), version=version
    )
    server.requests = _Forgetful()  # a bench's thousands of requests are not kept
    return server.start()


def _serve(conn, token: str, objects: list[dict], version: str) -> None:
    """In the forked process: the fake API server holding `objects`, until told to stop."""
    server = _server(token, version)
    while isinstance(objects, list):  # then the objects of the cluster's new nodes
        for obj in objects:
            server.put(obj)
        conn.send(server.url)
        try:
            objects = conn.recv()
        except EOFError:
            break
    server.stop()


class _Forgetful(list):
    def append(self, _item) -> None:
        pass


def _gpus_by_node(cluster) -> dict[str, list[tuple[int, str]]]:
    """(index, UUID) of each node's GPUs on `cluster`, by hostname."""
    from gpuquota.inventory.models import Gpu

    found: dict[str, list[tuple[int, str]]] = {}
    for host, index, uuid in (
        Gpu.objects.filter(node__cluster=cluster)
        .order_by("node_id", "index")
        .values_list("node__hostname", "index", "uuid")
    ):
        found.setdefault(host, []).append((index, uuid))
    return found


def _cluster_objects(
    cluster, now, seeded: set[str], dra: bool = False
) -> tuple[list[dict], int, int]:
    """The pods and Workloads (with `dra`, the ResourceSlices and claims too) of `cluster`'s
    nodes not in `seeded` (added to it) at `now`; (objects, pods, workloads)."""
    from gpuquota.inventory.models import Node
    from gpuquota.reservations.models import Assignment

    reserved = dict(
        Assignment.objects.filter(
            gpu__node__cluster=cluster, assigned_from__lte=now, assigned_until__gt=now, gpu__index=0
        ).values_list("gpu__node__hostname", "reservation__team__slug")
    )
    objects, pods, workloads = [], 0, 0
    started = now - timedelta(hours=1)
    hosts = Node.objects.filter(cluster=cluster).order_by("id").values_list("id", "hostname")
    gpus = _gpus_by_node(cluster) if dra else {}
    for position, (k, host) in enumerate(hosts):  # which nodes: by position, not id
        if host in seeded:
            continue
        seeded.add(host)
        if dra:
            objects.append(gpu_slice(host, gpus.get(host, [])))
        objects.append(
            pod(
                f"dcgm-exporter-{k}",
                "gpu-operator",
                host,
                gpus=0,
                started=started,
                labels={"app": "nvidia-dcgm-exporter"},
            )
        )
        pods += 1
        team = reserved.get(host)
        if team is not None:
            name = f"train-{k}-0"
            objects.append(
                pod(
                    name,
                    team,
                    host,
                    gpus=8,
                    started=started,
                    labels={"kueue.x-k8s.io/queue-name": f"gq-{team}", "job-name": f"train-{k}"},
                )
            )
            if dra:
                objects.append(gpu_claim(f"train-{k}-0-gpus", team, host, 8, pod=name))
            objects.append(
                workload(
                    f"train-{k}",
                    team,
                    f"gq-{team}",
                    admitted=started,
                    preempted=now - timedelta(minutes=2) if position % 20 == 3 else None,
                )
            )
            pods, workloads = pods + 1, workloads + 1
        if position % 100 == 41:
            objects.append(
                pod(
                    f"evicted-{k}-0",
                    "gpu-operator",
                    host,
                    gpus=0,
                    started=started,
                    labels={},
                    status={
                        "phase": "Failed",
                        "reason": "Evicted",
                        "message": "The node was low on resource: memory.",
                        "startTime": stamp(started),
                    },
                )
            )
            pods += 1
        if position % 200 == 77:
            ended = stamp(now - timedelta(minutes=10))
            objects.append(
                pod(
                    f"tainted-{k}-0",
                    "gpu-operator",
                    host,
                    gpus=0,
                    started=started,
                    labels={},
                    status={
                        "phase": "Failed",
                        "startTime": stamp(started),
                        "conditions": [
                            {
                                "type": "DisruptionTarget",
                                "status": "True",
                                "reason": "DeletionByTaintManager",
                                "lastTransitionTime": ended,
                            }
                        ],
                    },
                )
            )
            pods += 1
    return objects, pods, workloads


def kube_fake_install(site: Site, now) -> dict:
    """Make every cluster (not yet one) a Kubernetes cluster with Kueue behind a fake API
    server of its own, its teams' namespaces mapped; counts added."""
    from accounts.models import ClusterIdentity, Team
    from gpuquota.inventory.models import Cluster
    from gpuquota.reservations.models import Loan
    from gpuquota.schedulers.models import BackendConfig
    from gpuquota.schedulers.secrets import secret_encrypt

    counts = {"clusters": 0, "pods": 0, "workloads": 0, "namespaces": 0, "returned": 0}
    teams = list(Team.objects.order_by("id").values_list("id", "slug"))
    for cluster in Cluster.objects.order_by("id"):
        objects, pods, workloads = _cluster_objects(cluster, now, site.seeded, site.dra)
        counts["pods"] += pods
        counts["workloads"] += workloads
        if cluster.slug in site.servers:
            site.add(cluster.slug, objects)
        else:
            token = secrets.token_urlsafe(24)
            url = site.start(cluster.slug, token, objects)
            BackendConfig.objects.update_or_create(
                cluster=cluster,
                defaults={
                    "mode": BackendConfig.Mode.WRITE,
                    "api_url": url,
                    "token_encrypted": secret_encrypt(token),
                    "options": {"exact_gpus": True} if site.dra else {},
                    "command_timeout_s": 600,
                },
            )
            Cluster.objects.filter(pk=cluster.pk).update(scheduler=Cluster.Scheduler.KUBERNETES)
            counts["clusters"] += 1
        have = set(
            ClusterIdentity.objects.filter(
                cluster=cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE
            ).values_list("key", flat=True)
        )
        new = [
            ClusterIdentity(
                cluster=cluster,
                kind=ClusterIdentity.Kind.K8S_NAMESPACE,
                key=slug,
                team_id=team_id,
                valid_from=now - timedelta(days=90),
            )
            for team_id, slug in teams
            if slug not in have
        ]
        ClusterIdentity.objects.bulk_create(new, batch_size=5000)
        counts["namespaces"] += len(new)
    new_loans = list(
        Loan.objects.filter(returned_at__isnull=True, pk__gt=site.loans_after)
        .order_by("id")
        .values_list("id", flat=True)
    )
    site.loans_after = max(new_loans, default=site.loans_after)
    returned = [pk for n, pk in enumerate(new_loans) if n % 20 == 7]
    counts["returned"] = Loan.objects.filter(pk__in=returned).update(
        returned_at=now - timedelta(minutes=5), end_reason=Loan.EndReason.OWNER_ASK
    )
    return counts
