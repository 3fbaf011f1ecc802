"""Admins' pages in the product: quota rows over time (create, end), through the audited
services; every reservation with filters. 404 for everyone else. (Rate cards: rates.)"""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.manage import filters_read, form_apply, row_end
from gpuquota.reservations.forms import ListFilterForm, QuotaForm
from gpuquota.reservations.models import Quota
from gpuquota.reservations.quotas import quota_create, quota_end
from gpuquota.reservations.selectors import quotas_listed, reservations_filtered

PER_PAGE = 50


@login_required
def manage_home(request):
    """`/manage/`: every admin page, grouped as in the menu, with what each is for."""
    require_admin(request.user)
    return render(request, "reservations/manage_home.html")


@login_required
def quotas_page(request):
    require_admin(request.user)
    filters, chosen = filters_read(request, ListFilterForm)
    form = QuotaForm(request.POST or None, initial={"team": chosen.get("team"),
                                                    "gpu_class": chosen.get("gpu_class")})
    if request.method == "POST" and form_apply(request, form, lambda v: quota_create(
            team=v["team"], gpu_class=v["gpu_class"], gpus=v["gpus"],
            valid_from=v["valid_from"], valid_until=v["valid_until"], by=request.user,
            reason=v["reason"]), "Quota row added."):
        return redirect(request.get_full_path())
    rows = quotas_listed(team=chosen.get("team"), gpu_class=chosen.get("gpu_class"))
    return render(request, "reservations/manage_quotas.html", {
        "filters": filters, "form": form, "rows": rows, "now": timezone.now()})


@login_required
@require_POST
def quota_end_view(request, pk: int):
    require_admin(request.user)
    quota = get_object_or_404(Quota, pk=pk)
    return row_end(request, lambda at, reason: quota_end(
        quota=quota, at=at, by=request.user, reason=reason),
        f"{quota.team}'s {quota.gpu_class} quota row updated.", "manage_quotas")


@login_required
def reservations_page(request):
    require_admin(request.user)
    filters, chosen = filters_read(request, ListFilterForm)
    month = chosen.get("month")
    rows = reservations_filtered(team=chosen.get("team"), gpu_class=chosen.get("gpu_class"),
                                 status=chosen.get("status"),
                                 start=month.start if month else None,
                                 end=month.end if month else None)
    page = Paginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "reservations/manage_reservations.html", {
        "filters": filters, "page": page, "query": query.urlencode()})
