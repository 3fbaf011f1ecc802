"""The fleet page's summary cards: counted by the database over the whole fleet, each
minute by the `usage.fleet_summary` task (the mean utilization now reads every GPU's last
window: about a second of PostgreSQL at 100,000 GPUs), and read from its latest snapshot;
counted live when there is none from the last `FRESH_S` (a fresh install, beat stopped)."""

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Avg, Count, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from gpuquota.ingest.models import Sample
from gpuquota.inventory.models import Gpu, GpuHealthInterval, Node
from gpuquota.reservations.models import Assignment
from gpuquota.usage.conf import MAX_WINDOW_S, agent_silent_after_s
from gpuquota.usage.fleet import PROBLEM_STATES, FleetSummary, in_force, silent_nodes
from gpuquota.usage.models import FleetSummarySnapshot

#: How often the task counts, and how old a snapshot the page still reads.
INTERVAL_S = 60
FRESH_S = 2 * INTERVAL_S
FIELDS = ("gpus", "failed", "degraded", "reserved", "nodes_reporting", "nodes_silent",
          "nodes_nvml_down", "nodes_with_problems", "util_mean")


def physical_gpus(now: datetime):
    """The physical GPUs in service at `now`."""
    return Gpu.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=now),
                              parent__isnull=True)


def health_ids(now: datetime, *states: str):
    """The GPUs with a health interval in force at `now` (of `states`, when given)."""
    intervals = GpuHealthInterval.objects.filter(in_force(now, "valid_from", "valid_until"))
    return (intervals.filter(state__in=states) if states else intervals).values("gpu_id")


def assigned_ids(now: datetime, **reservation):
    """The GPUs with an assignment in force at `now` (of reservations matching)."""
    return Assignment.objects.filter(
        in_force(now, "assigned_from", "assigned_until"),
        **{f"reservation__{k}": v for k, v in reservation.items()}).values("gpu_id")


def _util_mean(now: datetime) -> Decimal | None:
    """Over the in-service GPUs of reporting nodes that are not failed: the mean of each
    one's utilization in its last window (the busiest of its MIG devices'). One query."""
    last_util = Sample.objects.filter(
        gpu_id=OuterRef("pk"),
        window_start__gte=now - timedelta(seconds=agent_silent_after_s() + MAX_WINDOW_S),
        window_start__lte=now,
    ).order_by("-window_start").values("util_gpu_avg")[:1]
    failed = health_ids(now, "failed")
    devices = (Gpu.objects.filter(Q(retired_at__isnull=True) | Q(retired_at__gt=now))
               .filter(node__last_seen_at__gte=now - timedelta(seconds=agent_silent_after_s()))
               .exclude(id__in=failed).exclude(parent_id__in=failed)
               .annotate(physical=Coalesce("parent_id", "id"), util_now=Subquery(last_util))
               .values("physical").annotate(util=Max("util_now")).order_by())
    return devices.aggregate(mean=Avg("util"))["mean"]


def fleet_summary(*, now: datetime) -> FleetSummary:
    """The summary cards over the whole fleet, counted by the database: three queries."""
    gpus = physical_gpus(now).aggregate(
        total=Count("id"), failed=Count("id", filter=Q(id__in=health_ids(now, "failed"))),
        degraded=Count("id", filter=Q(id__in=health_ids(now, "degraded"))),
        reserved=Count("id", filter=Q(id__in=assigned_ids(now))))
    silent = silent_nodes(now)
    nvml_down = Q(nvml_unavailable_since__isnull=False)
    problem_nodes = physical_gpus(now).filter(
        id__in=health_ids(now, *PROBLEM_STATES)).values("node_id")
    nodes = Node.objects.aggregate(
        total=Count("id"), silent=Count("id", filter=silent),
        nvml_down=Count("id", filter=nvml_down & ~silent),
        problems=Count("id", filter=silent | nvml_down | Q(id__in=problem_nodes)))
    util = _util_mean(now)
    return FleetSummary(
        gpus=gpus["total"], failed=gpus["failed"], degraded=gpus["degraded"],
        nodes_reporting=nodes["total"] - nodes["silent"], nodes_silent=nodes["silent"],
        nodes_nvml_down=nodes["nvml_down"], nodes_with_problems=nodes["problems"],
        util_mean=None if util is None else Decimal(str(util)), reserved=gpus["reserved"])


def fleet_summary_write(*, now: datetime) -> FleetSummarySnapshot:
    """Count the summary at `now` and keep it as the latest (idempotent)."""
    summary = fleet_summary(now=now)
    with transaction.atomic():
        FleetSummarySnapshot.objects.filter(at__lte=now).delete()
        return FleetSummarySnapshot.objects.create(
            at=now, **{name: getattr(summary, name) for name in FIELDS})


def fleet_summary_now(*, now: datetime) -> FleetSummary:
    """The summary of the latest snapshot when it is from the last `FRESH_S` (its `as_of`
    says when), else counted now."""
    snapshot = FleetSummarySnapshot.objects.filter(
        at__gte=now - timedelta(seconds=FRESH_S), at__lte=now).order_by("-at").first()
    if snapshot is None:
        return fleet_summary(now=now)
    return FleetSummary(**{name: getattr(snapshot, name) for name in FIELDS},
                        as_of=snapshot.at)
