"""Admin pages of telemetry sources: list with freshness and problems, create, change,
delete, pull now."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.telemetry.forms import SourceForm
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.selectors import sources_status
from gpuquota.telemetry.services import source_delete, source_pull, source_save


def _save(request, form: SourceForm):
    if not form.is_valid():
        return None
    try:
        return source_save(source=form.save(commit=False), secret=form.secret_value(),
                           actor=request.user)
    except DomainError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return None


@never_cache
def sources(request):
    """Admins: every source, its lag, its problem if any, its nodes; add one."""
    require_admin(request.user)
    form = SourceForm(request.POST or None)
    if request.method == "POST" and (source := _save(request, form)):
        messages.success(request, f"Source {source.name} added; beat pulls it every "
                                  f"{source.interval_s} s.")
        return redirect("telemetry_sources")
    return render(request, "telemetry/sources.html", {
        "statuses": sources_status(now=timezone.now()), "form": form})


@never_cache
def source_edit(request, pk: int):
    require_admin(request.user)
    source = get_object_or_404(TelemetrySource, pk=pk)
    form = SourceForm(request.POST or None, instance=source)
    if request.method == "POST" and (saved := _save(request, form)):
        messages.success(request, f"Source {saved.name} saved.")
        return redirect("telemetry_sources")
    return render(request, "telemetry/source_edit.html", {"source": source, "form": form})


@require_POST
def source_remove(request, pk: int):
    require_admin(request.user)
    source = get_object_or_404(TelemetrySource, pk=pk)
    source_delete(source=source, actor=request.user)
    messages.success(request, f"Source {source.name} deleted; what it imported stays.")
    return redirect("telemetry_sources")


@require_POST
def source_pull_now(request, pk: int):
    require_admin(request.user)
    source = get_object_or_404(TelemetrySource, pk=pk)
    result = source_pull(source=source, now=timezone.now().replace(microsecond=0))
    source.refresh_from_db()
    if result is None or source.last_error:
        messages.error(request, f"Pulling {source.name} failed: {source.last_error}")
    else:
        messages.success(request, f"Pulled {source.name}: {result.windows} windows, "
                                  f"{result.counts['samples']['stored']} samples stored.")
    return redirect("telemetry_sources")
