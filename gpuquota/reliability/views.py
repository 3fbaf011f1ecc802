from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.inventory.models import Gpu
from gpuquota.reliability.drains import FIXES, drain_release
from gpuquota.reliability.models import Drain
from gpuquota.reliability.pages import reliability_page
from gpuquota.reliability.rma import rma_open
from gpuquota.schedulers.backend import BackendError


@login_required
def fleet_reliability(request):
    """The fleet reliability page (admins)."""
    require_admin(request.user)
    now = timezone.now().replace(microsecond=0)
    return render(request, "reliability/fleet.html", reliability_page(now=now))


@login_required
@require_POST
def drain_return(request, pk: int):
    """An admin returns a drained node, naming the fix done."""
    require_admin(request.user)
    drain = get_object_or_404(Drain, pk=pk)
    fix = request.POST.get("fix", "")
    if fix not in set().union(*FIXES.values()):
        messages.error(request, "Name the fix that was done.")
        return redirect("fleet_reliability")
    try:
        drain_release(drain=drain, by=request.user, fix=fix,
                      at=timezone.now().replace(microsecond=0))
        messages.success(request, f"{drain.node.hostname} is back in service ({fix}).")
    except (DomainError, BackendError) as exc:
        messages.error(request, getattr(exc, "message", str(exc)))
    return redirect("fleet_reliability")


@login_required
@require_POST
def gpu_rma(request, uuid: str):
    """An admin records that the GPU is sent back (RMA), with its board serial."""
    require_admin(request.user)
    gpu = get_object_or_404(Gpu, uuid=uuid)
    try:
        rma = rma_open(gpu=gpu, serial=request.POST.get("serial", ""),
                       reason=request.POST.get("reason", ""), by=request.user,
                       at=timezone.now().replace(microsecond=0))
        messages.success(request, f"RMA of {rma.serial} recorded.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("gpu_detail", gpu.uuid)
