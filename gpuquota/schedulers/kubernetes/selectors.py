"""Reads for the Kubernetes cluster page: capabilities, each reservation's binding and the
objects written for it (foreign use is the backend's `foreign_use`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.models import Capabilities, ManagedObject, ReservationBinding


@dataclass
class ReservationHold:
    binding: ReservationBinding
    objects: list[ManagedObject] = field(default_factory=list)


def reservation_holds(*, cluster: Cluster) -> list[ReservationHold]:
    """Each reservation on `cluster` with a binding: its level, why, and the objects
    gpuquota wrote that hold it (its team's queues, or its claims and taints)."""
    objects = list(ManagedObject.objects.filter(cluster=cluster).order_by("kind", "name"))
    holds = []
    bindings = (ReservationBinding.objects
                .filter(reservation__assignments__gpu__node__cluster=cluster)
                .select_related("reservation__team", "reservation__gpu_class").distinct()
                .order_by("-reservation__start"))
    for binding in bindings:
        prefixes = (f"gq-res-{binding.reservation_id}",)
        if binding.scheduler_object:
            prefixes += (binding.scheduler_object,)
        holds.append(ReservationHold(binding, [
            o for o in objects if any(o.name == p or o.name.startswith((p + "/", p + "-"))
                                      for p in prefixes) and o.kind != "ResourceFlavor"]))
    return holds


def kubernetes_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(scheduler=Cluster.Scheduler.KUBERNETES))


def cluster_capabilities(*, cluster: Cluster) -> Capabilities | None:
    return Capabilities.objects.filter(cluster=cluster).first()
