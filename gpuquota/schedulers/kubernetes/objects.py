"""Reservations, loans and teams on one cluster -> the Kubernetes objects Kueue (and, in the
exact-GPU mode, DRA) should have. Pure functions: no API calls, no database."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.utils.text import slugify

from gpuquota.schedulers.backend import owned_name
from gpuquota.schedulers.kubernetes.api import KINDS
from gpuquota.schedulers.kubernetes.names import namespaces_usable
from gpuquota.schedulers.kubernetes.options import KubernetesOptions
from gpuquota.schedulers.kubernetes.stored import when_can_borrow
from gpuquota.schedulers.selectors import PlanInputs, ReservationInput

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuquota"}
KUEUE = KINDS["ClusterQueue"].api_version
RESERVED_TAINT = "gpuquota.io/reserved"


def labels(cluster_slug: str, **extra: str) -> dict:
    return {**MANAGED_BY, "gpuquota.io/cluster": cluster_slug, **extra}


def flavor_name(gpu_class: str) -> str:
    return owned_name(slugify(gpu_class))


def queue_name(team_slug: str) -> str:
    return owned_name(team_slug)


def held_now(inputs: PlanInputs, options: KubernetesOptions) -> list[ReservationInput]:
    """Reservations whose quota is in force at `inputs.at`: from `lead_time_s` before their
    start (so Kueue can preempt borrowers in time) until their end."""
    lead = timedelta(seconds=options.lead_time_s)
    return [r for r in inputs.reservations if r.start - lead <= inputs.at < r.end]


def resource_flavor(gpu_class: str, *, cluster_slug: str, options: KubernetesOptions) -> dict:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(gpu_class), "labels": labels(cluster_slug)},
            "spec": {"nodeLabels": options.node_labels(gpu_class, slugify(gpu_class)),
                     "tolerations": options.tolerations(gpu_class)}}


def cluster_queue(team, *, classes, reserved: dict, lendable: dict, cluster_slug: str,
                  options: KubernetesOptions, kueue_minor: tuple[int, int] | None = None) -> dict:
    """The team's ClusterQueue: per flavor, nominalQuota = GPUs reserved now; only GPUs on
    loan may be lent (lendingLimit), and the owner reclaims them by preempting borrowers."""
    flavors = []
    for gpu_class in classes:
        # Quantities as strings, as Kueue's webhooks write them back (resource.Quantity):
        # an integer would read as drift after every defaulting round trip.
        quota = {"name": options.resource_name,
                 "nominalQuota": str(reserved.get(gpu_class, 0)),
                 "lendingLimit": str(lendable.get(gpu_class, 0))}
        if options.borrowing_limit is not None:
            quota["borrowingLimit"] = str(options.borrowing_limit)
        flavors.append({"name": flavor_name(gpu_class), "resources": [quota]})
    spec = {
        "cohort": options.cohort,
        "namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": sorted(namespaces_usable(team.namespaces))}]},
        "queueingStrategy": "BestEffortFIFO",
        "flavorFungibility": {"whenCanBorrow": when_can_borrow(kueue_minor),
                              "whenCanPreempt": "TryNextFlavor"},
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                       "borrowWithinCohort": {"policy": "Never"}},
        "stopPolicy": "None",
    }
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": [options.resource_name],
                                   "flavors": flavors}]
    return {"apiVersion": KUEUE, "kind": "ClusterQueue",
            "metadata": {"name": queue_name(team.slug),
                         "labels": labels(cluster_slug, **{"gpuquota.io/team": team.slug})},
            "spec": spec}


def local_queue(team, namespace: str, *, cluster_slug: str) -> dict:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": queue_name(team.slug), "namespace": namespace,
                         "labels": labels(cluster_slug, **{"gpuquota.io/team": team.slug})},
            "spec": {"clusterQueue": queue_name(team.slug), "stopPolicy": "None"}}


def kueue_objects(inputs: PlanInputs, *, cluster_slug: str, options: KubernetesOptions,
                  kueue_minor: tuple[int, int] | None = None) -> list[dict]:
    """Flavors, then a ClusterQueue per team with a namespace, then its LocalQueues, in the
    words of Kueue release `kueue_minor` (None: unknown)."""
    reserved: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in held_now(inputs, options):
        reserved[r.team_id][r.gpu_class] += r.count
    classes_of = {r.id: r.gpu_class for r in inputs.reservations}
    lendable: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for loan in inputs.loans:
        lendable[loan.team_id][classes_of.get(loan.reservation_id, "")] += 1
    classes = sorted(set(inputs.classes) | {r.gpu_class for r in inputs.reservations})
    objects = [resource_flavor(c, cluster_slug=cluster_slug, options=options) for c in classes]
    teams = [t for t in inputs.teams.values() if t.namespaces]
    for team in sorted(teams, key=lambda t: t.slug):
        objects.append(cluster_queue(team, classes=classes, reserved=reserved[team.id],
                                     lendable=lendable[team.id], cluster_slug=cluster_slug,
                                     options=options, kueue_minor=kueue_minor))
    for team in sorted(teams, key=lambda t: t.slug):
        objects += [local_queue(team, ns, cluster_slug=cluster_slug) for ns in team.namespaces]
    return objects


def claim_template(reservation: ReservationInput, namespace: str, *, cluster_slug: str,
                   options: KubernetesOptions, gpus) -> dict:
    """Exact GPUs (DRA): a claim for exactly `gpus` (the reservation's, less those on loan),
    by NVML UUID, that tolerates the taint keeping every other team off them."""
    uuids = sorted(g.uuid for g in gpus)
    cel = ("device.attributes['gpu.nvidia.com'].uuid in ["
           + ", ".join(f"'{u}'" for u in uuids) + "]")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": owned_name("res", reservation.id), "namespace": namespace,
                         "labels": labels(cluster_slug, **{
                             "gpuquota.io/team": reservation.team_slug,
                             "gpuquota.io/reservation": str(reservation.id)})},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": options.dra_device_class, "allocationMode": "ExactCount",
                "count": len(uuids), "selectors": [{"cel": {"expression": cel}}],
                "tolerations": [{"key": RESERVED_TAINT, "operator": "Equal",
                                 "value": reservation.team_slug}]}}]}}}}


def device_taint_rules(reservation: ReservationInput, *, cluster_slug: str,
                       options: KubernetesOptions, api_version: str, gpus) -> list[dict]:
    """One DeviceTaintRule per reserved GPU not on loan (the NVIDIA driver names a node's
    GPUs gpu-N in the node's pool): claims without the team's toleration are never given it,
    and NoExecute evicts the pods of those that hold it (a borrower when its loan ends)."""
    rules = []
    for gpu in sorted(gpus, key=lambda g: (g.node, g.index or 0)):
        rules.append({
            "apiVersion": api_version, "kind": "DeviceTaintRule",
            "metadata": {"name": owned_name("res", reservation.id, slugify(gpu.node),
                                            f"gpu{gpu.index}"),
                         "labels": labels(cluster_slug, **{
                             "gpuquota.io/reservation": str(reservation.id)})},
            "spec": {"deviceSelector": {"driver": options.dra_driver, "pool": gpu.node,
                                        "device": f"gpu-{gpu.index}"},
                     "taint": {"key": RESERVED_TAINT, "value": reservation.team_slug,
                               "effect": "NoExecute"}}})
    return rules


def dra_objects(inputs: PlanInputs, *, cluster_slug: str, options: KubernetesOptions,
                taint_api_version: str) -> list[dict]:
    """Per held reservation its claim templates, and its GPUs' DeviceTaintRules in
    `taint_api_version` (the version the cluster serves them in; "": not served). A GPU on
    loan is in neither, so a borrower's claim can be given it; when the loan ends both come
    back and the taint evicts the borrower."""
    lent = {loan.gpu.gpu_id for loan in inputs.loans}
    objects = []
    for r in sorted(held_now(inputs, options), key=lambda r: r.id):
        gpus = [g for g in r.gpus if g.gpu_id not in lent]
        if not gpus:
            continue
        team = inputs.teams.get(r.team_id)
        for namespace in (team.namespaces if team else ()):
            objects.append(claim_template(r, namespace, cluster_slug=cluster_slug,
                                          options=options, gpus=gpus))
        if taint_api_version:
            objects += device_taint_rules(r, cluster_slug=cluster_slug, options=options,
                                          api_version=taint_api_version, gpus=gpus)
    return objects
