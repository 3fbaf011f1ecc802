"""The admins' rate-card page (`/manage/rate-cards/`): cards per class over time, created
and ended through the audited services. 404 for everyone else."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.permissions import require_admin
from gpuquota.core.manage import filters_read, form_apply, row_end
from gpuquota.rates.forms import RateCardFilterForm, RateCardForm
from gpuquota.rates.models import RateCard
from gpuquota.rates.selectors import rate_cards_listed
from gpuquota.rates.services import rate_card_create, rate_card_end


@login_required
def rate_cards_page(request):
    require_admin(request.user)
    filters, chosen = filters_read(request, RateCardFilterForm)
    form = RateCardForm(request.POST or None, initial={"gpu_class": chosen.get("gpu_class")})
    if request.method == "POST" and form_apply(request, form, lambda v: rate_card_create(
            gpu_class=v["gpu_class"], valid_from=v["valid_from"],
            valid_until=v["valid_until"], reserved_rate=v["reserved_rate"],
            on_demand_rate=v["on_demand_rate"], borrowed_rate=v["borrowed_rate"],
            currency=v["currency"], by=request.user,
            reason=v["reason"]), "Rate card added."):
        return redirect(request.get_full_path())
    cards = rate_cards_listed(gpu_class=chosen.get("gpu_class"))
    return render(request, "rates/manage_rate_cards.html", {
        "filters": filters, "form": form, "rows": cards, "now": timezone.now()})


@login_required
@require_POST
def rate_card_end_view(request, pk: int):
    require_admin(request.user)
    card = get_object_or_404(RateCard, pk=pk)
    return row_end(request, lambda at, reason: rate_card_end(
        rate_card=card, at=at, by=request.user, reason=reason),
        f"The {card.gpu_class} rate card was updated.", "manage_rate_cards")
