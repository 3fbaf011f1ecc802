"""The Kubernetes cluster page (admins): capabilities, bindings with the objects written,
foreign use of a month with its evidence."""

from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from accounts.permissions import require_admin
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.kubernetes.selectors import cluster_capabilities, reservation_holds
from gpuquota.schedulers.selectors import foreign_use, foreign_use_period


def cluster_page(request, slug: str):
    require_admin(request.user)
    cluster = get_object_or_404(Cluster, slug=slug, scheduler=Cluster.Scheduler.KUBERNETES)
    now = timezone.now()
    error = ""
    try:
        period = Period.parse_month(request.GET.get("month") or f"{now:%Y-%m}")
    except ValueError as exc:
        period, error = foreign_use_period(now), str(exc)
    foreign = foreign_use(cluster=cluster, period=period)
    return render(request, "kubernetes/cluster.html", {
        "cluster": cluster, "capabilities": cluster_capabilities(cluster=cluster),
        "holds": reservation_holds(cluster=cluster), "period": period, "month_error": error,
        "foreign": foreign, "foreign_count": len(foreign),
    })
