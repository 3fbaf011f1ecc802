"""The fleet page at any size: the database counts the summary cards, filters the nodes
and GPUs and paginates the nodes; only the page's nodes are then read in full. A fixed
number of queries whatever the number of nodes and GPUs, and no list of every GPU in
Python (docs/benchmarks.md#fleet-scale)."""

from dataclasses import dataclass
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q
from django.utils import timezone

from accounts.models import Team
from gpuquota.inventory.models import Cluster, GpuClass, Node
from gpuquota.usage.fleet import (
    PROBLEM_STATES,
    FleetSummary,
    NodeNow,
    fleet_now,
    silent_nodes,
)
from gpuquota.usage.fleet_summary import (
    assigned_ids,
    fleet_summary_now,
    health_ids,
    physical_gpus,
)

NODES_PER_PAGE = 25
HEALTH_STATES = ("healthy", "degraded", "failed")


@dataclass(frozen=True)
class FleetFilter:
    """What the fleet page shows; every field optional. `team` and the search by team
    name only ever match teams the viewer may see."""

    q: str = ""
    gpu_class: int | None = None
    cluster: int | None = None
    health: str = ""  # one of HEALTH_STATES
    reserved: bool | None = None
    team: int | None = None
    problems: bool = False

    @property
    def narrows_gpus(self) -> bool:
        return bool(self.q or self.gpu_class or self.health or self.team
                    or self.reserved is not None)


@dataclass
class NodeShown:
    """A node of the page: its matching GPUs in full, and counts of all its GPUs."""

    now: NodeNow
    gpus_total: int
    failed: int
    degraded: int
    reserved: int


@dataclass
class FleetPage:
    summary: FleetSummary
    page: Page  # of NodeShown
    nodes_matching: int
    gpus_matching: int | None


@dataclass
class FleetChoices:
    """What the filters offer: every class and cluster, the teams the viewer may see."""

    classes: list[GpuClass]
    clusters: list[Cluster]
    teams: list[Team]


def fleet_choices(*, visible_team_ids: set[int] | None) -> FleetChoices:
    """The filters' choices (None: every team, for admins). Three queries."""
    teams = Team.objects.order_by("name")
    if visible_team_ids is not None:
        teams = teams.filter(id__in=visible_team_ids)
    return FleetChoices(classes=list(GpuClass.objects.order_by("name")),
                        clusters=list(Cluster.objects.order_by("name")), teams=list(teams))


def _gpus_matching(f: FleetFilter, *, now: datetime, team_ids: list[int]):
    """The in-service physical GPUs the GPU filters keep (the search by team name among
    `team_ids` only)."""
    gpus = physical_gpus(now)
    if f.gpu_class:
        gpus = gpus.filter(gpu_class_id=f.gpu_class)
    if f.health == "healthy":
        gpus = gpus.exclude(id__in=health_ids(now))
    elif f.health:
        gpus = gpus.filter(id__in=health_ids(now, f.health))
    if f.reserved is not None:
        gpus = (gpus.filter if f.reserved else gpus.exclude)(id__in=assigned_ids(now))
    if f.team:
        gpus = gpus.filter(id__in=assigned_ids(now, team_id=f.team))
    if f.q:
        gpus = gpus.filter(Q(node__hostname__icontains=f.q) | Q(uuid__icontains=f.q) | Q(
            id__in=assigned_ids(now, team__name__icontains=f.q, team_id__in=team_ids)))
    return gpus


def _nodes_matching(f: FleetFilter, *, now: datetime, gpus):
    nodes = Node.objects.select_related("cluster").order_by("cluster__name", "hostname")
    if f.cluster:
        nodes = nodes.filter(cluster_id=f.cluster)
    if f.problems:
        problem_nodes = physical_gpus(now).filter(
            id__in=health_ids(now, *PROBLEM_STATES)).values("node_id")
        nodes = nodes.filter(silent_nodes(now) | Q(nvml_unavailable_since__isnull=False)
                             | Q(id__in=problem_nodes))
    if f.narrows_gpus:
        nodes = nodes.filter(id__in=gpus.values("node_id"))
    return nodes


def fleet_page(*, filters: FleetFilter, teams: list[Team], page: str | None,
               now: datetime | None = None) -> FleetPage:
    """The fleet page: whole-fleet summary, the nodes with GPUs matching `filters` (only
    their matching GPUs; every node when nothing narrows the GPUs), paginated by node, the
    page's nodes read in full by `fleet_now`. The search by team name looks at `teams`
    only (those the viewer may see). Counted, filtered and paginated by the database: a
    fixed number of queries, none reading every GPU into Python."""
    now = now or timezone.now()
    gpus = _gpus_matching(filters, now=now, team_ids=[t.id for t in teams])
    nodes = _nodes_matching(filters, now=now, gpus=gpus)
    paged = Paginator(nodes, NODES_PER_PAGE).get_page(page)
    node_ids = [node.id for node in paged.object_list]
    shown_gpus = set(gpus.filter(node_id__in=node_ids).values_list("id", flat=True))
    full = {n.node.id: n for n in fleet_now(now=now, node_ids=node_ids, gpu_ids=shown_gpus)}
    counts = {row["node_id"]: row for row in physical_gpus(now).filter(node_id__in=node_ids)
              .values("node_id").order_by().annotate(
                  total=Count("id"),
                  failed=Count("id", filter=Q(id__in=health_ids(now, "failed"))),
                  degraded=Count("id", filter=Q(id__in=health_ids(now, "degraded"))),
                  reserved=Count("id", filter=Q(id__in=assigned_ids(now))))}
    none = {"total": 0, "failed": 0, "degraded": 0, "reserved": 0}
    paged.object_list = [
        NodeShown(now=full[i], gpus_total=counts.get(i, none)["total"],
                  failed=counts.get(i, none)["failed"],
                  degraded=counts.get(i, none)["degraded"],
                  reserved=counts.get(i, none)["reserved"])
        for i in node_ids
    ]
    gpus_matching = None  # said only when the filters narrow the GPUs
    if filters.narrows_gpus:
        gpus_matching = (gpus.filter(node__in=nodes.values("id")).count()
                         if filters.cluster or filters.problems else gpus.count())
    return FleetPage(summary=fleet_summary_now(now=now), page=paged,
                     nodes_matching=paged.paginator.count, gpus_matching=gpus_matching)
