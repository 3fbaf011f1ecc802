"""Foreign GPU use for the statements review: per cluster, how many jobs (Slurm, from its
accounting) or pods (Kubernetes, from the agents' process records) of another team ran on
GPUs a reservation held in the month, outside a loan. Each count links to its cluster's
page, where the evidence is."""

from collections import Counter
from dataclasses import dataclass

from django.urls import reverse

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.kubernetes.selectors import foreign_use_counts
from gpuquota.schedulers.selectors import foreign_use


@dataclass(frozen=True)
class ForeignUseCount:
    cluster: str
    count: int
    url: str


def foreign_use_by_cluster(*, period: Period) -> list[ForeignUseCount]:
    """Clusters with foreign use in `period`, by name."""
    slurm = Counter(use.job.cluster_id for use in foreign_use(since=period.start)
                    if use.job.started_at < period.end)
    found = [(c, n, reverse("scheduler_cluster", args=[c.slug]))
             for c in Cluster.objects.filter(id__in=slurm) for n in [slurm[c.id]]]
    found += [(c, n, reverse("kubernetes_cluster", args=[c.slug]) + f"?month={period.start:%Y-%m}")
              for c, n in foreign_use_counts(period=period).items() if n]
    return [ForeignUseCount(c.name, n, url) for c, n, url in sorted(found, key=lambda f: f[0].name)]
