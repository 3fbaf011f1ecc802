"""Selectors for the fleet pages: hardware state now, a GPU's history. Each runs a
fixed number of queries whatever the number of nodes, GPUs or samples."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Max, Q, Sum
from django.utils import timezone

from gpuquota.ingest.models import GpuEvent, Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval, Node
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, agent_silent_after_s
from gpuquota.usage.models import GpuHourUsage


def in_force(at: datetime, start: str = "valid_from", end: str = "valid_until") -> Q:
    """Rows whose [start, end) holds `at` (an open end: still in force)."""
    return Q(**{f"{start}__lte": at}) & (Q(**{f"{end}__isnull": True}) | Q(**{f"{end}__gt": at}))


@dataclass
class GpuNow:
    gpu: Gpu
    health: str = "healthy"
    health_reason: str = ""
    util: Decimal | None = None
    memory_used_bytes: int | None = None
    sample_at: datetime | None = None
    assignment: Assignment | None = None


@dataclass
class NodeNow:
    node: Node
    silent: bool
    gpus: list[GpuNow] = field(default_factory=list)

    @property
    def util_mean(self) -> Decimal | None:
        """Mean utilization of the node's GPUs shown that are not failed, in their last
        reported window (the fleet's "mean utilization now", for one node); None: none
        reported."""
        found = [g.util for g in self.gpus if g.util is not None and g.health != "failed"]
        return (sum(found) / len(found)).quantize(Decimal("0.1")) if found else None


def silent_nodes(now: datetime) -> Q:
    """Nodes whose agent has not reported for AGENT_SILENT_AFTER_S (or never)."""
    cutoff = now - timedelta(seconds=agent_silent_after_s())
    return Q(last_seen_at__isnull=True) | Q(last_seen_at__lt=cutoff)


def node_is_silent(node: Node, now: datetime) -> bool:
    """No report for AGENT_SILENT_AFTER_S (or never)."""
    return node.last_seen_at is None or (
        now - node.last_seen_at > timedelta(seconds=agent_silent_after_s())
    )


def nodes_silent_count(*, now: datetime | None = None) -> int:
    """Nodes whose agent has been silent for AGENT_SILENT_AFTER_S."""
    now = now or timezone.now()
    return Node.objects.filter(silent_nodes(now)).count()


def nodes_nvml_unavailable_count(*, now: datetime | None = None) -> int:
    """Nodes whose agent reports (not silent) while NVML cannot answer."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=agent_silent_after_s())
    return Node.objects.filter(nvml_unavailable_since__isnull=False,
                               last_seen_at__gte=cutoff).count()


def fleet_now(*, now: datetime | None = None, node_ids: list[int] | None = None,
              gpu_ids: set[int] | None = None) -> list[NodeNow]:
    """Every node (or those of `node_ids`, in that order) with its in-service GPUs (or
    those of `gpu_ids`, with their MIG devices): health, latest utilization (within the
    silence threshold) and current assignment. Five queries."""
    now = now or timezone.now()
    in_service = Gpu.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=now))
    if gpu_ids is not None:
        in_service = in_service.filter(Q(id__in=gpu_ids) | Q(parent_id__in=gpu_ids))
    gpus = list(in_service.select_related("gpu_class", "node__cluster"))
    physical = {g.id: GpuNow(gpu=g) for g in gpus if g.parent_id is None}
    parent_of = {g.id: g.parent_id or g.id for g in gpus}
    for interval in GpuHealthInterval.objects.filter(in_force(now), gpu_id__in=physical):
        physical[interval.gpu_id].health = interval.state
        physical[interval.gpu_id].health_reason = interval.reason
    running = Assignment.objects.filter(
        in_force(now, "assigned_from", "assigned_until"), gpu_id__in=physical
    ).select_related("reservation__team")
    for assignment in running:
        physical[assignment.gpu_id].assignment = assignment
    recent = Sample.objects.filter(
        gpu_id__in=list(parent_of),
        window_start__gte=now - timedelta(seconds=agent_silent_after_s() + MAX_WINDOW_S),
        window_start__lte=now,
    ).order_by("window_start")
    latest: dict[int, dict[int, dict]] = defaultdict(dict)
    for row in recent.values("gpu_id", "window_start", "util_gpu_avg", "memory_used_bytes_avg"):
        latest[parent_of[row["gpu_id"]]][row["gpu_id"]] = row  # ordered: the last one wins
    for gpu_id, by_device in latest.items():
        view = physical.get(gpu_id)
        if view is None:
            continue
        view.sample_at = max(r["window_start"] for r in by_device.values())
        if view.health == "failed":
            continue  # a lost GPU's last readings say nothing about it now
        utils = [r["util_gpu_avg"] for r in by_device.values() if r["util_gpu_avg"] is not None]
        memory = [r["memory_used_bytes_avg"] for r in by_device.values()
                  if r["memory_used_bytes_avg"] is not None]
        view.util = max(utils) if utils else None
        view.memory_used_bytes = sum(memory) if memory else None
    listed = Node.objects.select_related("cluster")
    if node_ids is not None:
        by_id = listed.in_bulk(node_ids)
        listed = [by_id[i] for i in node_ids if i in by_id]
    nodes = {n.id: NodeNow(node=n, silent=node_is_silent(n, now)) for n in listed}
    for view in sorted(physical.values(), key=lambda v: (v.gpu.index is None, v.gpu.index or 0,
                                                          v.gpu.uuid)):
        if view.gpu.node_id in nodes:
            nodes[view.gpu.node_id].gpus.append(view)
    return list(nodes.values())


PROBLEM_STATES = ("failed", "degraded")


@dataclass
class FleetSummary:
    gpus: int
    failed: int
    degraded: int
    nodes_reporting: int
    nodes_silent: int
    nodes_nvml_down: int
    nodes_with_problems: int
    util_mean: Decimal | None
    reserved: int
    as_of: datetime | None = None  # when counted by the task; None: now

    @property
    def usable(self) -> int:
        """In service and not failed: what capacity counts."""
        return self.gpus - self.failed


@dataclass
class HourPoint:
    hour: datetime
    covered_s: int
    busy_s: int
    util_mean: Decimal | None
    memory_used_bytes_max: int | None


@dataclass
class UsageBy:
    kind: str
    reservation_id: int | None
    team_id: int | None
    team_name: str | None
    covered_s: Decimal
    busy_s: Decimal
    users: set = field(default_factory=set)


def gpu_history(*, gpu: Gpu, start: datetime, end: datetime) -> dict:
    """A GPU's hourly utilization and memory, who used it, its health and events over
    [start, end): five queries."""
    hourly = (
        GpuHourUsage.objects.filter(gpu=gpu, hour__gte=start, hour__lt=end)
        .values("hour")
        .annotate(
            # a window split between n teams has n rows: those are added once, below
            covered=Sum("covered_s", filter=Q(split_ways=1)),
            busy=Sum("busy_s", filter=Q(split_ways=1)),
            weighted=Sum("util_weighted", filter=Q(split_ways=1)),
            memory=Max("memory_used_bytes_max"),
        )
        .order_by("hour")
    )
    rows = list(
        GpuHourUsage.objects.filter(gpu=gpu, hour__gte=start, hour__lt=end)
        .select_related("team")
        .values("hour", "kind", "reservation_id", "team_id", "team__name", "split_ways",
                "covered_s", "busy_s", "util_weighted", "users_seen")
    )
    split_sums: dict = defaultdict(lambda: [0, 0, Decimal(0)])
    by: dict[tuple, UsageBy] = {}
    for row in rows:
        n = row["split_ways"]
        if n > 1:
            acc = split_sums[row["hour"]]
            acc[0] += Decimal(row["covered_s"]) / n
            acc[1] += Decimal(row["busy_s"]) / n
            acc[2] += row["util_weighted"] / n
        key = (row["kind"], row["reservation_id"], row["team_id"])
        usage = by.setdefault(key, UsageBy(row["kind"], row["reservation_id"], row["team_id"],
                                           row["team__name"], Decimal(0), Decimal(0)))
        usage.covered_s += Decimal(row["covered_s"]) / n
        usage.busy_s += Decimal(row["busy_s"]) / n
        usage.users.update(row["users_seen"])
    points = []
    for row in hourly:
        covered = Decimal(row["covered"] or 0) + split_sums[row["hour"]][0]
        weighted = (row["weighted"] or Decimal(0)) + split_sums[row["hour"]][2]
        points.append(HourPoint(
            hour=row["hour"], covered_s=int(covered),
            busy_s=int((row["busy"] or 0) + split_sums[row["hour"]][1]),
            util_mean=(weighted / covered) if covered else None,
            memory_used_bytes_max=row["memory"],
        ))
    health = list(GpuHealthInterval.objects.filter(gpu=gpu).select_related("closed_by")
                  .order_by("-valid_from")[:50])
    device_ids = [gpu.id, *gpu.mig_devices.values_list("id", flat=True)]
    events = list(GpuEvent.objects.filter(gpu_id__in=device_ids).order_by("-ts")[:50])
    return {
        "points": points,
        "usage_by": sorted(by.values(), key=lambda u: -u.busy_s),
        "health": health,
        "events": events,
    }


def health_now(*, gpu_ids: list[int], at: datetime) -> dict[int, GpuHealthInterval]:
    """The open health interval (failed or degraded) of each of `gpu_ids` at `at`."""
    return {h.gpu_id: h for h in GpuHealthInterval.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=at), gpu_id__in=gpu_ids,
        valid_from__lte=at)}
