"""Loan returns seen on the cluster (kubernetes.md#lending): a loan whose return was asked
is freed when Kueue preempts the borrowers to give the quota back (a Workload preempted
for reclamation within the cohort), or in the exact-GPU mode when the API server shows no
ResourceClaim of another team holding the GPU any more; `freed_at - returned_at` is its
time-to-return."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ClusterIdentity
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.models import BackendConfig, BindingLevel, Capabilities
from gpuquota.schedulers.services import problem_record

#: Kueue's reasons of the Preempted condition that give quota back to its owner.
RECLAIM_REASONS = ("InCohortReclamation", "InCohortReclaimWhileBorrowing")


def reclaim_preemptions(workloads: list[dict]) -> list[tuple[datetime, str]]:
    """(when, namespace/name) of every Workload preempted to reclaim quota, oldest first."""
    found = []
    for workload in workloads:
        for condition in workload.get("status", {}).get("conditions", []):
            if (condition.get("type") == "Preempted" and condition.get("status") == "True"
                    and condition.get("reason") in RECLAIM_REASONS):
                at = parse_datetime(condition.get("lastTransitionTime") or "")
                if at is not None:
                    meta = workload["metadata"]
                    found.append((at, f"{meta.get('namespace', '')}/{meta['name']}"))
    return sorted(found)


@transaction.atomic
def loan_returns_record(*, cluster, preemptions: list[tuple[datetime, str]]) -> int:
    """Each returned loan on `cluster` not yet freed is freed at the first reclamation
    preemption at or after its return; audited with the preempted workload. Idempotent."""
    freed = 0
    loans = (Loan.objects.select_for_update()
             .filter(gpu__node__cluster=cluster, returned_at__isnull=False,
                     freed_at__isnull=True).order_by("returned_at", "id"))
    for loan in loans:
        first = next(((at, name) for at, name in preemptions if at >= loan.returned_at), None)
        if first is None:
            continue
        loan.freed_at = first[0].replace(microsecond=0)
        loan.save(update_fields=["freed_at"])
        audit_record(actor=None, action="loan.freed", obj=loan, changes={
            "freed_at": loan.freed_at.isoformat(), "preempted_workload": first[1],
            "time_to_return_s": int((loan.freed_at - loan.returned_at).total_seconds())})
        freed += 1
    return freed


def _holders(claims: list[dict]) -> dict[tuple[str, str, str], set[str]]:
    """By (driver, pool, device) allocated to a claim, the namespaces of the claims."""
    held: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results", []):
            held[(result.get("driver", ""), result.get("pool", ""),
                  result.get("device", ""))].add(claim["metadata"].get("namespace", ""))
    return held


def _team_namespaces(cluster, team_ids: set[int], at: datetime) -> dict[int, set[str]]:
    """The Kubernetes namespaces of each team on `cluster` at `at` (one query for all)."""
    found: dict[int, set[str]] = defaultdict(set)
    for team_id, key in ClusterIdentity.objects.filter(
            cluster=cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE, team_id__in=team_ids,
            valid_from__lte=at).exclude(valid_until__lte=at).values_list("team_id", "key"):
        found[team_id].add(key)
    return found


@transaction.atomic
def dra_loans_freed(*, cluster, claims: list[dict], driver: str, at: datetime) -> int:
    """Each returned loan on `cluster` not yet freed whose GPU no ResourceClaim outside the
    reserving team's namespaces holds any more (the claims as the API server shows them at
    `at`) is freed at `at`; audited. Idempotent. The teams' namespaces are read once for all
    the loans (a loan still held was a query of its own each pass: issue 34)."""
    freed = 0
    loans = list(Loan.objects.select_for_update()
                 .filter(gpu__node__cluster=cluster, returned_at__isnull=False,
                         freed_at__isnull=True)
                 .select_related("gpu__node", "assignment__reservation")
                 .order_by("returned_at", "id"))
    if not loans:
        return 0
    namespaces = _team_namespaces(cluster, {loan.assignment.reservation.team_id
                                            for loan in loans}, at)
    holders = _holders(claims)
    for loan in loans:
        owners = namespaces[loan.assignment.reservation.team_id]
        device = (driver, loan.gpu.node.hostname, f"gpu-{loan.gpu.index}")
        if holders.get(device, set()) - owners:
            continue
        loan.freed_at = at.replace(microsecond=0)
        loan.save(update_fields=["freed_at"])
        audit_record(actor=None, action="loan.freed", obj=loan, changes={
            "freed_at": loan.freed_at.isoformat(), "device": "/".join(device),
            "seen_by": "ResourceClaims on the API server",
            "time_to_return_s": int((loan.freed_at - loan.returned_at).total_seconds())})
        freed += 1
    return freed


def cluster_returns_observe(*, cluster, api: Api, dra_driver: str = "") -> int:
    """Read the cluster's Workloads (or, in the exact-GPU mode, with `dra_driver`, its
    ResourceClaims) and record the loans they show returned."""
    what, kind = ("ResourceClaims", "ResourceClaim") if dra_driver else ("Workloads", "Workload")
    try:
        found = api.list(KINDS[kind], selector="")
    except BackendError as exc:
        problem_record(cluster=cluster, summary=f"Reading {what}: {exc.message}",
                       detail=exc.detail)
        return 0
    if dra_driver:
        return dra_loans_freed(cluster=cluster, claims=found, driver=dra_driver,
                               at=timezone.now())
    return loan_returns_record(cluster=cluster, preemptions=reclaim_preemptions(found))


def clusters_returns_observe() -> dict[str, int]:
    """Every Kubernetes cluster whose backend writes: loans freed, by cluster slug."""
    freed = {}
    for config in BackendConfig.objects.filter(
            mode=BackendConfig.Mode.WRITE,
            cluster__scheduler=Cluster.Scheduler.KUBERNETES).select_related("cluster"):
        backend = backend_for(config.cluster, config)
        caps = Capabilities.objects.filter(cluster=config.cluster).first()
        exact = caps is not None and caps.best_binding == BindingLevel.EXACT_GPUS
        try:
            driver = backend.options.dra_driver if exact else ""
        except BackendError:  # unusable options: the reconcile reports them
            continue
        freed[config.cluster.slug] = cluster_returns_observe(cluster=config.cluster,
                                                             api=backend.api,
                                                             dra_driver=driver)
    return freed
