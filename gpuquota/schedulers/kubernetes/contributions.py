"""What the Kubernetes backend adds to other pages (`gpuquota.core.contributions`): foreign
use on the team page (the team is told) and on the admin's home page."""

from datetime import datetime

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.sections import Section
from gpuquota.core.timeutil import Period
from gpuquota.schedulers.kubernetes.selectors import (
    foreign_use_counts,
    foreign_uses_month,
    kubernetes_clusters,
)


def team_foreign_context(*, team, now: datetime) -> dict | None:
    period = Period.month(now.year, now.month)
    uses = [u for c in kubernetes_clusters()
            for u in foreign_uses_month(cluster=c, period=period, team=team)]
    return {"foreign_uses": uses, "foreign_month": period.start} if uses else None


def foreign_attention(now: datetime) -> list[Attention]:
    items = []
    for cluster, count in foreign_use_counts(period=Period.month(now.year, now.month)).items():
        items.append(Attention(
            key=f"foreign-use-{cluster.slug}",
            label=f"Foreign GPU use on {cluster.name} this month", count=count,
            url=reverse("kubernetes_cluster", args=[cluster.slug]) + f"?month={now:%Y-%m}",
            detail="pods of another team on reserved GPUs, outside a loan", order=60))
    return items


PAGE_SECTIONS = [
    Section(page="team", slot="top", template="kubernetes/_team_foreign.html",
            context=team_foreign_context, order=30),
]

ATTENTION = [foreign_attention]
