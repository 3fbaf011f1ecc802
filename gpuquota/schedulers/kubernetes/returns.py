"""Loan returns seen on the cluster (kubernetes.md#lending): a loan whose return was asked
is freed when Kueue preempts the borrowers to give the quota back (a Workload preempted
for reclamation within the cohort); `freed_at - returned_at` is its time-to-return."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils.dateparse import parse_datetime

from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError, backend_for
from gpuquota.schedulers.kubernetes.api import KINDS, Api
from gpuquota.schedulers.models import BackendConfig
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


def cluster_returns_observe(*, cluster, api: Api) -> int:
    """Read the cluster's Workloads and record the loans they show returned."""
    try:
        workloads = api.list(KINDS["Workload"], selector="")
    except BackendError as exc:
        problem_record(cluster=cluster, summary=f"Reading Workloads: {exc.message}",
                       detail=exc.detail)
        return 0
    return loan_returns_record(cluster=cluster, preemptions=reclaim_preemptions(workloads))


def clusters_returns_observe() -> dict[str, int]:
    """Every Kubernetes cluster whose backend writes: loans freed, by cluster slug."""
    freed = {}
    for config in BackendConfig.objects.filter(
            mode=BackendConfig.Mode.WRITE,
            cluster__scheduler=Cluster.Scheduler.KUBERNETES).select_related("cluster"):
        backend = backend_for(config.cluster, config)
        freed[config.cluster.slug] = cluster_returns_observe(cluster=config.cluster,
                                                             api=backend.api)
    return freed
