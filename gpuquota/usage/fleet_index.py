"""The fleet page at any size: one pass over every in-service GPU (a few columns each,
its health, current team and last utilization computed by the database) gives the summary
cards, the search and the filters; only the page's nodes are then read in full. A fixed
number of queries whatever the number of nodes and GPUs."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.paginator import Page, Paginator
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from accounts.models import Team
from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuHealthInterval, Node
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, agent_silent_after_s
from gpuquota.usage.fleet import PROBLEM_STATES, FleetSummary, NodeNow, fleet_now

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
class GpuRow:
    id: int
    uuid: str
    node_id: int
    gpu_class_id: int
    health: str
    team_id: int | None
    util: Decimal | None = None


@dataclass
class NodeRow:
    id: int
    hostname: str
    cluster_id: int
    silent: bool
    nvml_down: bool = False  # the agent reports, but NVML cannot answer
    gpus: list[GpuRow] = field(default_factory=list)

    @property
    def has_problem(self) -> bool:
        return (self.silent or self.nvml_down
                or any(g.health in PROBLEM_STATES for g in self.gpus))


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
    gpus_matching: int


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


def _in_force(at: datetime, start: str, end: str) -> Q:
    return Q(**{f"{start}__lte": at}) & (Q(**{f"{end}__isnull": True}) | Q(**{f"{end}__gt": at}))


def fleet_index(*, now: datetime) -> list[NodeRow]:
    """Every node (cluster, hostname order) with its in-service physical GPUs: health now,
    team of the running assignment, utilization of the last window (max over its MIG
    devices; none when failed). Four queries."""
    silent_cutoff = now - timedelta(seconds=agent_silent_after_s())
    # health and team as lists of their own, not per-GPU subqueries: a plan that costly
    # makes PostgreSQL JIT-compile it (two seconds at 10,000 GPUs)
    health = dict(GpuHealthInterval.objects.filter(_in_force(now, "valid_from", "valid_until"))
                  .order_by().values_list("gpu_id", "state"))
    team = dict(Assignment.objects.filter(_in_force(now, "assigned_from", "assigned_until"))
                .order_by().values_list("gpu_id", "reservation__team_id"))
    last_util = Sample.objects.filter(
        gpu_id=OuterRef("pk"),
        window_start__gte=now - timedelta(seconds=agent_silent_after_s() + MAX_WINDOW_S),
        window_start__lte=now,
    ).order_by("-window_start").values("util_gpu_avg")[:1]
    devices = (
        Gpu.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=now))
        .annotate(util_now=Subquery(last_util))
        .order_by("index", "uuid")
        .values_list("id", "uuid", "node_id", "gpu_class_id", "parent_id", "util_now")
    )
    gpus: dict[int, GpuRow] = {}
    mig_utils: list[tuple[int, Decimal]] = []
    for gid, uuid, node_id, class_id, parent_id, util in devices:
        if parent_id is not None:
            if util is not None:
                mig_utils.append((parent_id, util))
            continue
        gpus[gid] = GpuRow(gid, uuid, node_id, class_id, health.get(gid, "healthy"),
                             team.get(gid), util)
    for parent_id, util in mig_utils:
        parent = gpus.get(parent_id)
        if parent is not None and (parent.util is None or util > parent.util):
            parent.util = util
    nodes = {
        nid: NodeRow(nid, hostname, cluster_id, seen is None or seen < silent_cutoff,
                     nvml_down is not None)
        for nid, hostname, cluster_id, seen, nvml_down in Node.objects.order_by(
            "cluster__name", "hostname").values_list("id", "hostname", "cluster_id",
                                                     "last_seen_at", "nvml_unavailable_since")
    }
    for gpu in gpus.values():
        if gpu.health == "failed":
            gpu.util = None  # a lost GPU's last readings say nothing about it now
        nodes[gpu.node_id].gpus.append(gpu)
    return list(nodes.values())


def index_summary(nodes: list[NodeRow]) -> FleetSummary:
    """The summary cards over the whole fleet (no queries); the mean utilization is over
    GPUs of reporting nodes that have a last window (failed GPUs have none)."""
    gpus = [g for n in nodes for g in n.gpus]
    utils = [g.util for n in nodes if not n.silent for g in n.gpus if g.util is not None]
    silent = sum(1 for n in nodes if n.silent)
    return FleetSummary(
        gpus=len(gpus),
        failed=sum(1 for g in gpus if g.health == "failed"),
        degraded=sum(1 for g in gpus if g.health == "degraded"),
        nodes_reporting=len(nodes) - silent,
        nodes_silent=silent,
        nodes_nvml_down=sum(1 for n in nodes if n.nvml_down and not n.silent),
        nodes_with_problems=sum(1 for n in nodes if n.has_problem),
        util_mean=sum(utils) / len(utils) if utils else None,
        reserved=sum(1 for g in gpus if g.team_id is not None),
    )


def _gpu_matches(gpu: GpuRow, node: NodeRow, f: FleetFilter, team_names: dict[int, str]) -> bool:
    if f.gpu_class and gpu.gpu_class_id != f.gpu_class:
        return False
    if f.health and gpu.health != f.health:
        return False
    if f.reserved is not None and (gpu.team_id is not None) != f.reserved:
        return False
    if f.team and gpu.team_id != f.team:
        return False
    if f.q:
        needle = f.q.lower()
        return (needle in node.hostname.lower() or needle in gpu.uuid.lower()
                or needle in team_names.get(gpu.team_id, "").lower())
    return True


def fleet_page(*, filters: FleetFilter, teams: list[Team], page: str | None,
               now: datetime | None = None) -> FleetPage:
    """The fleet page: whole-fleet summary, the nodes with GPUs matching `filters` (only
    their matching GPUs; every node when nothing narrows the GPUs), paginated by node, the
    page's nodes read in full by `fleet_now`. The search by team name looks at `teams`
    only (those the viewer may see). Nine queries at most."""
    now = now or timezone.now()
    index = fleet_index(now=now)
    team_names = {t.id: t.name for t in teams}
    shown: list[tuple[NodeRow, list[GpuRow]]] = []
    for node in index:
        if filters.cluster and node.cluster_id != filters.cluster:
            continue
        if filters.problems and not node.has_problem:
            continue
        matching = [g for g in node.gpus if _gpu_matches(g, node, filters, team_names)]
        if matching or not filters.narrows_gpus:
            shown.append((node, matching))
    paged = Paginator(shown, NODES_PER_PAGE).get_page(page)
    gpu_ids = {g.id for _node, matching in paged.object_list for g in matching}
    full = {n.node.id: n for n in fleet_now(
        now=now, node_ids=[node.id for node, _m in paged.object_list], gpu_ids=gpu_ids)}
    paged.object_list = [
        NodeShown(now=full[node.id], gpus_total=len(node.gpus),
                  failed=sum(1 for g in node.gpus if g.health == "failed"),
                  degraded=sum(1 for g in node.gpus if g.health == "degraded"),
                  reserved=sum(1 for g in node.gpus if g.team_id is not None))
        for node, _matching in paged.object_list
    ]
    return FleetPage(
        summary=index_summary(index), page=paged, nodes_matching=len(shown),
        gpus_matching=sum(len(m) for _n, m in shown),
    )
