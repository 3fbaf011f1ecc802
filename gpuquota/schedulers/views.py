"""Admins' pages of the scheduler backends: the clusters, and per cluster its configuration,
capabilities, problems, drift, runs and bindings, a reconcile or dry run by hand, and the
export for sites that forbid writes."""

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.forms import BackendConfigForm
from gpuquota.schedulers.models import BackendConfig, ReconcileRun
from gpuquota.schedulers.reconcile import cluster_plan, cluster_reconcile
from gpuquota.schedulers.selectors import (
    cluster_backend_detail,
    clusters_backends,
    foreign_use_period,
)
from gpuquota.schedulers.services import backend_config_update


def _cluster(slug: str) -> Cluster:
    return get_object_or_404(Cluster.objects.exclude(scheduler=Cluster.Scheduler.NONE), slug=slug)


def clusters(request):
    """Every cluster with a scheduler and the state of its backend."""
    require_admin(request.user)
    return render(request, "schedulers/clusters.html", {"clusters": clusters_backends()})


@never_cache  # the form carries the (write-only) token field
def cluster_detail(request, slug: str):
    require_admin(request.user)
    cluster = _cluster(slug)
    config = BackendConfig.objects.filter(cluster=cluster).first()
    form = BackendConfigForm(request.POST or None, initial=BackendConfigForm.initial_from(config))
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        token = "" if data["remove_token"] else (data["token"] or None)
        try:
            backend_config_update(
                cluster=cluster, actor=request.user, token=token, mode=data["mode"],
                commands_dir=data["commands_dir"], api_url=data["api_url"],
                command_timeout_s=data["command_timeout_s"], options=data["options"])
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Backend of {cluster} saved.")
            return redirect("scheduler_cluster", slug=cluster.slug)
    now = timezone.now()
    period, month_error = foreign_use_period(now), ""
    if month := request.GET.get("month"):
        try:
            period = Period.parse_month(month)
        except ValueError as exc:
            month_error = str(exc)
    return render(request, "schedulers/cluster.html", {
        "cluster": cluster, "config": config, "form": form, "period": period,
        "month_error": month_error, "caps": getattr(cluster, "scheduler_capabilities", None),
        **cluster_backend_detail(cluster=cluster, now=now, period=period),
    })


@require_POST
def cluster_reconcile_now(request, slug: str):
    """Reconcile now, or (`dry_run`) only show the commands it would run."""
    require_admin(request.user)
    cluster = _cluster(slug)
    if not BackendConfig.objects.filter(cluster=cluster).exists():
        messages.error(request, "Save the backend's configuration first.")
        return redirect("scheduler_cluster", slug=slug)
    dry_run = request.POST.get("dry_run") == "1"
    summary = cluster_reconcile(cluster=cluster, reason=f"by {request.user.username}",
                                dry_run=dry_run, wait_s=10)
    if summary.outcome == "busy":
        messages.warning(request, "Another reconcile of this cluster is still running "
                         "(one starts when the configuration is saved): nothing was done; "
                         "its run appears under Runs.")
    elif summary.error:
        messages.error(request, f"Reconcile {summary.outcome}: {summary.error}")
    elif dry_run:
        run = ReconcileRun.objects.filter(cluster=cluster).first()
        messages.info(request, f"Dry run: {len(run.commands) if run else 0} command(s) would "
                      "run; they are listed under Runs.")
    else:
        messages.success(request, f"Reconciled: {len(summary.actions)} change(s), "
                         f"{summary.drift} drifted object(s) repaired.")
    return redirect("scheduler_cluster", slug=slug)


def cluster_export(request, slug: str, name: str):
    """One file of the plan as a site applies it itself (text, downloaded)."""
    require_admin(request.user)
    cluster = _cluster(slug)
    try:
        backend, plan = cluster_plan(cluster=cluster)
    except (BackendError, BackendConfig.DoesNotExist) as exc:
        messages.error(request, f"No export: {getattr(exc, 'message', 'no configuration')}")
        return redirect("scheduler_cluster", slug=slug)
    files = backend.export(plan)
    if name not in files:
        raise Http404("No such export file.")
    response = HttpResponse(files[name], content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
