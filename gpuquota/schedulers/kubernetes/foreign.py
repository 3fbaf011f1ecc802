"""Foreign use (kubernetes.md#foreign-use): a reserved GPU running, outside a loan, a pod of
a namespace that is not the reserving team's, as the agents saw it (each process's pod and
namespace). The evidence is the agents' process records: GPU, pod, namespace, windows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from accounts.models import ClusterIdentity
from gpuquota.ingest.models import ProcessRecord
from gpuquota.inventory.models import Gpu
from gpuquota.reservations.models import Assignment, Loan, Reservation
from gpuquota.schedulers.backend import ForeignUse

NOT_HELD = (Reservation.Status.PENDING, Reservation.Status.CANCELLED, Reservation.Status.DENIED)


EVIDENCE = "the agents' process records: the pod and namespace of each process on the GPU"


@dataclass
class _Seen:
    """One pod of another team on one reserved GPU, as the windows add up."""

    reservation: object
    namespace: str
    using_team: str
    pod: str
    node: str
    gpu_uuid: str
    first_seen: datetime
    last_seen: datetime
    windows: int
    seen_s: int

    def use(self, cluster_id: int) -> ForeignUse:
        return ForeignUse(
            cluster_id=cluster_id, reservation=self.reservation, account=self.namespace,
            using_team=self.using_team, job=self.pod, first_seen=self.first_seen,
            last_seen=self.last_seen, nodes=(self.node,), gpus=(self.gpu_uuid,),
            seen_s=self.seen_s,
            evidence=f"{EVIDENCE} ({self.windows} window{'s' if self.windows != 1 else ''})")


def _intervals(rows, key):
    found = defaultdict(list)
    for row in rows:
        found[key(row)].append(row)
    return found


def _covering(intervals, at: datetime, start: str, end: str):
    return next((i for i in intervals if getattr(i, start) <= at
                 and (getattr(i, end) is None or at < getattr(i, end))), None)


def foreign_uses(*, cluster, start: datetime, end: datetime, team=None) -> list[ForeignUse]:
    """Every foreign use on `cluster` seen in [start, end) (on `team`'s reservations only,
    if given), oldest first: one per GPU, reservation and pod."""
    gpus = {g.pk: g for g in Gpu.objects.filter(node__cluster=cluster).select_related("node")}
    assignments = Assignment.objects.filter(
        gpu_id__in=gpus, assigned_from__lt=end, assigned_until__gt=start,
    ).exclude(reservation__status__in=NOT_HELD).select_related("reservation__team")
    if team is not None:
        assignments = assignments.filter(reservation__team=team)
    by_gpu = _intervals(assignments, lambda a: a.gpu_id)
    if not by_gpu:
        return []
    loans = _intervals(Loan.objects.filter(gpu_id__in=by_gpu, lent_from__lt=end).filter(
        Q(returned_at__isnull=True) | Q(returned_at__gt=start)), lambda loan: loan.gpu_id)
    namespaces = _intervals(ClusterIdentity.objects.filter(
        cluster=cluster, kind=ClusterIdentity.Kind.K8S_NAMESPACE, valid_from__lt=end,
    ).filter(Q(valid_until__isnull=True) | Q(valid_until__gt=start)).select_related("team"),
        lambda ident: ident.key)
    windows = (ProcessRecord.objects.filter(
        gpu_id__in=by_gpu, window_start__gte=start, window_start__lt=end,
        job_source=ProcessRecord.JobSource.KUBERNETES)
        .values_list("gpu_id", "job_account", "job_id", "window_start", "window_end")
        .distinct().order_by("gpu_id", "job_account", "job_id", "window_start"))
    found: dict[tuple, _Seen] = {}
    for gpu_id, namespace, pod, window_start, window_end in windows:
        assignment = _covering(by_gpu[gpu_id], window_start, "assigned_from", "assigned_until")
        if assignment is None or _covering(loans.get(gpu_id, []), window_start, "lent_from",
                                           "returned_at"):
            continue
        owner = _covering(namespaces.get(namespace or "", []), window_start, "valid_from",
                          "valid_until")
        reservation = assignment.reservation
        if owner is not None and owner.team_id == reservation.team_id:
            continue
        key = (gpu_id, reservation.pk, namespace, pod)
        use = found.get(key)
        if use is None:
            gpu = gpus[gpu_id]
            found[key] = _Seen(
                reservation=reservation, namespace=namespace or "",
                using_team=owner.team.slug if owner and owner.team else "", pod=pod or "",
                node=gpu.node.hostname, gpu_uuid=gpu.uuid, first_seen=window_start,
                last_seen=window_end, windows=1,
                seen_s=int((window_end - window_start).total_seconds()))
        else:
            use.last_seen, use.windows = max(use.last_seen, window_end), use.windows + 1
            use.seen_s += int((window_end - window_start).total_seconds())
    return [u.use(cluster.pk) for u in sorted(
        found.values(), key=lambda u: (u.first_seen, u.gpu_uuid, u.pod))]
