from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from prometheus_client import CONTENT_TYPE_LATEST

from accounts.permissions import is_admin, require_admin
from accounts.selectors import teams_visible
from gpuquota.core.errors import DomainError
from gpuquota.core.sections import page_sections
from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.ingest.health import gpu_health_recover
from gpuquota.inventory.models import Gpu, Node, gpu_uuid_normalize
from gpuquota.outbox.conf import rollup_freshness_s
from gpuquota.usage.charts import COMPACT, svg_bar_chart, svg_reserved_busy_chart
from gpuquota.usage.conf import agent_silent_after_s, busy_util_percent
from gpuquota.usage.fleet import gpu_history, health_now
from gpuquota.usage.fleet_index import FleetFilter, fleet_choices, fleet_page
from gpuquota.usage.forms import FleetFilterForm, HealthRecoverForm
from gpuquota.usage.freshness import usage_freshness
from gpuquota.usage.metrics import metrics_access, metrics_render
from gpuquota.usage.selectors import LAST_SPANS, period_last, period_to_date
from gpuquota.usage.to_date import utilization_overview


def _visible_team_ids(user) -> set[int] | None:
    """None: every team (admins)."""
    return None if is_admin(user) else set(teams_visible(user=user).values_list("id", flat=True))


def _gpu_or_404(uuid: str) -> Gpu:
    try:
        uuid = gpu_uuid_normalize(uuid)
    except ValueError as exc:
        raise Http404("No such GPU.") from exc
    return get_object_or_404(Gpu.objects.select_related("node__cluster", "gpu_class"), uuid=uuid)


@login_required
def fleet(request):
    visible = _visible_team_ids(request.user)
    choices = fleet_choices(visible_team_ids=visible)
    form = FleetFilterForm(request.GET, classes=choices.classes, clusters=choices.clusters,
                           teams=choices.teams)
    form.is_valid()  # the valid fields filter; a bad one shows its error and is ignored
    wanted = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
    filters = FleetFilter(**{**wanted, "q": wanted.get("q", "").strip()})
    result = fleet_page(filters=filters, teams=choices.teams, page=request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    problems_query = query.copy()
    problems_query["problems"] = "1"
    all_query = query.copy()
    all_query.pop("problems", None)
    context = {"result": result, "summary": result.summary, "form": form, "filters": filters,
               "query": query.urlencode(), "problems_query": problems_query.urlencode(),
               "all_query": all_query.urlencode(), "problems": filters.problems,
               "visible": visible, "is_admin": is_admin(request.user),
               "freshness": usage_freshness(),
               "sections": page_sections("fleet", user=request.user, now=timezone.now())}
    return render(request, "usage/fleet.html", context)


@login_required
def gpu_detail(request, uuid: str):
    gpu = _gpu_or_404(uuid)
    end = hour_floor(timezone.now()) + timedelta(hours=1)
    try:
        days = min(14, max(1, int(request.GET["days"])))
    except (KeyError, ValueError):
        days = None
    history = gpu_history(gpu=gpu, start=end - timedelta(days=days or 2), end=end)
    if days is None:  # a GPU with a day of history or less is not drawn over two
        first = min((p.hour for p in history["points"]), default=end)
        days = 1 if first >= end - timedelta(days=1) else 2
        history["points"] = [p for p in history["points"] if p.hour >= end - timedelta(days=days)]
    by_hour = {p.hour: p for p in history["points"]}
    hours = [end - timedelta(hours=h) for h in range(days * 24, 0, -1)]
    memory = [(h, by_hour[h].memory_used_bytes_max if h in by_hour else None) for h in hours]
    memory_max = gpu.memory_total_bytes or max([m or 0 for _h, m in memory] + [1])
    context = {
        "gpu": gpu, "days": days, **history,
        "visible": _visible_team_ids(request.user), "is_admin": is_admin(request.user),
        "util_chart": svg_bar_chart(
            points=[(h, by_hour[h].util_mean if h in by_hour else None) for h in hours],
            max_value=100, title="Mean GPU utilization per hour"),
        "memory_chart": svg_bar_chart(
            points=[(h, None if m is None else m / 2**30) for h, m in memory],
            max_value=memory_max / 2**30, unit=" GiB", color="#7a5af8",
            title="Peak memory used per hour"),
        # Only a GPU failed or degraded now has a recovery to record.
        "recover_form": HealthRecoverForm()
        if is_admin(request.user) and any(h.valid_until is None and h.state != "healthy"
                                          for h in history["health"]) else None,
        "sections": page_sections("gpu", gpu=gpu, user=request.user, now=timezone.now()),
    }
    return render(request, "usage/gpu_detail.html", context)


@login_required
def node_detail(request, pk: int):
    """A node: its agent, its GPUs and their health now, and what the apps above add
    (reliability)."""
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    gpus = list(Gpu.objects.filter(node=node, parent__isnull=True, retired_at__isnull=True)
                .select_related("gpu_class").order_by("index", "uuid"))
    now = timezone.now()
    health = health_now(gpu_ids=[g.id for g in gpus], at=now)
    context = {"node": node, "gpus": [(g, health.get(g.id)) for g in gpus],
               "sections": page_sections("node", node=node, user=request.user, now=now)}
    return render(request, "usage/node_detail.html", context)


@require_POST
@login_required
def gpu_recover(request, uuid: str):
    require_admin(request.user)
    gpu = _gpu_or_404(uuid)
    form = HealthRecoverForm(request.POST)
    if form.is_valid():
        try:
            gpu_health_recover(gpu=gpu, at=form.cleaned_data["at"], by=request.user,
                               note=form.cleaned_data["note"])
            messages.success(request, "Recovery recorded; past usage is being recomputed.")
        except DomainError as exc:
            messages.error(request, exc.message)
    else:
        messages.error(request, "; ".join(e for errors in form.errors.values() for e in errors))
    return redirect("gpu_detail", uuid=gpu.uuid)


@login_required
def utilization(request):
    now = timezone.now()
    try:
        month = Period.parse_month(request.GET["month"]) if request.GET.get("month") else \
            Period.month(now.year, now.month)
    except ValueError as exc:
        raise Http404(str(exc)) from exc
    last = request.GET.get("last")
    if last not in LAST_SPANS:  # unknown values fall back to the month
        last = None
    period = period_last(span=LAST_SPANS[last], now=now) if last else period_to_date(month, now)
    overview = utilization_overview(period=period, unreserved=is_admin(request.user))
    context = {
        "month": month, "period": period, "last": last, "overview": overview,
        "freshness": usage_freshness(since=period.start, until=period.end, now=now),
        "sections": page_sections("utilization", user=request.user, period=period, now=now),
        "fleet_chart": svg_reserved_busy_chart(
            days=overview.fleet_days, title="Fleet: reserved versus busy GPU-hours per day"),
        "class_charts": [(klass, svg_reserved_busy_chart(
            days=days, title=f"{klass.name}: reserved versus busy GPU-hours per day",
            size=COMPACT)) for klass, days in overview.class_days],
    }
    return render(request, "usage/utilization.html", context)


@login_required
def glossary(request):
    return render(request, "usage/glossary.html", {
        "busy_threshold": busy_util_percent(), "silent_after_s": agent_silent_after_s(),
        "freshness_s": int(rollup_freshness_s())})


def metrics(request):
    """Prometheus scrape: only with METRICS_TOKEN or from METRICS_ALLOWED_NETWORKS."""
    access = metrics_access(authorization=request.headers.get("Authorization", ""),
                            client_ip=request.META.get("REMOTE_ADDR", ""))
    if access == 404:
        raise Http404("Metrics are off: set METRICS_TOKEN or METRICS_ALLOWED_NETWORKS.")
    if access != 200:
        response = HttpResponse("Not allowed to read the metrics.\n", status=access,
                                content_type="text/plain; charset=utf-8")
        if access == 401:
            response["WWW-Authenticate"] = 'Bearer realm="gpuquota-metrics"'
        return response
    return HttpResponse(metrics_render(), content_type=CONTENT_TYPE_LATEST)
