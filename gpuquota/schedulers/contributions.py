"""What the scheduler backends add to other apps (`gpuquota.core.contributions`): how the
scheduler holds each of a team's reservations and the jobs that ran in it, and foreign use
on its GPUs, on the team page; clusters with open problems and foreign use, on the admin's
home page; a reconcile after every change of reservations, quotas or maintenance. Foreign
use is the one of docs/accounting.md#foreign-use, in the statement period: the same number
as on the cluster pages and the statements' review."""

from collections import Counter
from datetime import datetime

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.sections import Section
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.models import Problem
from gpuquota.schedulers.selectors import foreign_use, foreign_use_period, team_scheduler_holds
from gpuquota.schedulers.services import schedulers_reconcile_request


def team_holds_context(*, team, can_act, now: datetime):
    if not can_act:  # leads and admins
        return None
    holds = team_scheduler_holds(team=team, now=now)
    return {"holds": holds} if holds else None


def team_foreign_context(*, team, month) -> dict | None:
    """The team is told of others' work on its reserved GPUs in the month its page shows
    (`?month=`, the current one by default; the admins are told too)."""
    found = foreign_use(period=month, team=team)
    return {"foreign": found, "foreign_period": month} if found else None


def problems_attention(now: datetime) -> list[Attention]:
    open_problems = Problem.objects.filter(status=Problem.Status.OPEN)
    by_cluster = Counter(f.cluster_id for f in foreign_use(period=foreign_use_period(now)))
    names = dict(Cluster.objects.filter(pk__in=by_cluster).values_list("pk", "name"))
    return [Attention(
        key="scheduler_problems", label="Scheduler problems", count=open_problems.count(),
        url=reverse("scheduler_clusters"),
        detail=", ".join(sorted(set(open_problems.values_list("cluster__name", flat=True)))),
        order=60,
    ), Attention(
        key="foreign_use", label="Foreign GPU use this month",
        count=sum(by_cluster.values()), url=reverse("scheduler_clusters"),
        detail=", ".join(sorted(f"{names[c]}: {n}" for c, n in by_cluster.items())), order=61,
    )]


PAGE_SECTIONS = [
    Section(page="team", slot="main", template="schedulers/_team_holds.html",
            context=team_holds_context, order=10),
    Section(page="team", slot="top", template="schedulers/_team_foreign.html",
            context=team_foreign_context, order=30),
]

ATTENTION = [problems_attention]
RESERVATIONS_CHANGED = [schedulers_reconcile_request]
