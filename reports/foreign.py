"""Foreign GPU use for the statements review: per cluster, how many jobs or pods of another
team ran on GPUs a reservation held in the month, outside a loan (docs/accounting.md#
foreign-use, each cluster's backend reading its own evidence). Each count links to its
cluster's page for the same month, where the evidence is: the same number."""

from collections import Counter
from dataclasses import dataclass

from django.urls import reverse

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.selectors import foreign_use


@dataclass(frozen=True)
class ForeignUseCount:
    cluster: str
    count: int
    url: str


def _cluster_url(cluster: Cluster, period: Period) -> str:
    name = ("kubernetes_cluster" if cluster.scheduler == Cluster.Scheduler.KUBERNETES
            else "scheduler_cluster")
    return reverse(name, args=[cluster.slug]) + f"?month={period.start:%Y-%m}"


def foreign_use_by_cluster(*, period: Period) -> list[ForeignUseCount]:
    """Clusters with foreign use in `period`, by name."""
    counts = Counter(use.cluster_id for use in foreign_use(period=period))
    return [ForeignUseCount(c.name, counts[c.pk], _cluster_url(c, period))
            for c in Cluster.objects.filter(pk__in=counts).order_by("name")]
