"""Admins' pages in the product: quota rows and rate cards over time (create, end),
through the audited services; every reservation with filters. 404 for everyone else."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.errors import DomainError
from gpuquota.rates.models import RateCard
from gpuquota.rates.services import rate_card_create, rate_card_end
from gpuquota.reservations.forms import EndForm, ListFilterForm, QuotaForm, RateCardForm
from gpuquota.reservations.models import Quota
from gpuquota.reservations.quotas import quota_create, quota_end
from gpuquota.reservations.selectors import quotas_listed, reservations_filtered

PER_PAGE = 50


def _filters(request) -> tuple[ListFilterForm, dict]:
    form = ListFilterForm(request.GET or None)
    if form.is_bound and form.is_valid():
        return form, {k: v for k, v in form.cleaned_data.items() if v}
    return form, {}


def _form_errors(form) -> str:
    return "; ".join(e for errors in form.errors.values() for e in errors)


def _apply(request, form, action, success: str) -> bool:
    """Call the service with the form's data; its refusal becomes the form's error."""
    if not form.is_valid():
        return False
    try:
        action(form.cleaned_data)
    except DomainError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return False
    messages.success(request, success)
    return True


def _end(request, end, success: str, back: str):
    """Parse an EndForm, call `end(at, reason)` (a service), say what happened, go back."""
    form = EndForm(request.POST)
    if form.is_valid():
        try:
            end(form.cleaned_data["at"], form.cleaned_data["reason"])
            messages.success(request, success)
        except DomainError as exc:
            messages.error(request, exc.message)
    else:
        messages.error(request, _form_errors(form))
    return redirect(back)


@login_required
def manage_home(request):
    """`/manage/`: every admin page, grouped as in the menu, with what each is for."""
    require_admin(request.user)
    return render(request, "reservations/manage_home.html")


@login_required
def quotas_page(request):
    require_admin(request.user)
    filters, chosen = _filters(request)
    form = QuotaForm(request.POST or None, initial={"team": chosen.get("team"),
                                                    "gpu_class": chosen.get("gpu_class")})
    if request.method == "POST" and _apply(request, form, lambda v: quota_create(
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
    return _end(request, lambda at, reason: quota_end(
        quota=quota, at=at, by=request.user, reason=reason),
        f"{quota.team}'s {quota.gpu_class} quota row updated.", "manage_quotas")


@login_required
def rate_cards_page(request):
    require_admin(request.user)
    filters, chosen = _filters(request)
    form = RateCardForm(request.POST or None, initial={"gpu_class": chosen.get("gpu_class")})
    if request.method == "POST" and _apply(request, form, lambda v: rate_card_create(
            gpu_class=v["gpu_class"], valid_from=v["valid_from"],
            valid_until=v["valid_until"], reserved_rate=v["reserved_rate"],
            on_demand_rate=v["on_demand_rate"], borrowed_rate=v["borrowed_rate"],
            currency=v["currency"], by=request.user,
            reason=v["reason"]), "Rate card added."):
        return redirect(request.get_full_path())
    cards = RateCard.objects.select_related("gpu_class").order_by("gpu_class__name",
                                                                   "valid_from")
    if chosen.get("gpu_class"):
        cards = cards.filter(gpu_class=chosen["gpu_class"])
    return render(request, "reservations/manage_rate_cards.html", {
        "filters": filters, "form": form, "rows": cards, "now": timezone.now()})


@login_required
@require_POST
def rate_card_end_view(request, pk: int):
    require_admin(request.user)
    card = get_object_or_404(RateCard, pk=pk)
    return _end(request, lambda at, reason: rate_card_end(
        rate_card=card, at=at, by=request.user, reason=reason),
        f"The {card.gpu_class} rate card was updated.", "manage_rate_cards")


@login_required
def reservations_page(request):
    require_admin(request.user)
    filters, chosen = _filters(request)
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
