"""Reclaim pages: the admin review page and its actions, one recommendation with its
audit trail, and the team's actions (object, release idle GPUs). Views parse, ask
accounts.permissions, call one service, render."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts.permissions import (
    can_act_for_team,
    is_admin,
    require_admin,
    team_for_action,
    team_for_view,
)
from gpuquota.core.errors import DomainError
from gpuquota.reservations.models import Reservation
from reclaim import lifecycle, services
from reclaim.backtest import rules_backtest
from reclaim.conf import policy
from reclaim.forms import (
    BacktestForm,
    BulkAcceptForm,
    DismissForm,
    ExemptionForm,
    ObjectForm,
    ReasonForm,
)
from reclaim.models import Exemption, Recommendation
from reclaim.selectors_pages import recommendation_view, review_context

R = Recommendation.Status


def _errors(form) -> str:
    return " ".join(m for ms in form.errors.values() for m in ms)


def _recommendation(pk: int) -> Recommendation:
    return get_object_or_404(Recommendation.objects.select_related("reservation__team"), pk=pk)


def _snooze_days() -> str:
    days = policy().snooze.total_seconds() / 86400
    return f"{days:g}"


def _backtest(form: BacktestForm) -> dict | None:
    """The backtest of the submitted thresholds (None when nothing was asked)."""
    if not form.is_bound or not form.is_valid():
        return None
    v = form.cleaned_data
    lookback = None if v["lookback_hours"] is None else timedelta(hours=v["lookback_hours"])
    what_if = policy().override(idle_busy_fraction=v["idle_busy_fraction"],
                                min_coverage=v["min_coverage"], lookback=lookback,
                                rule=v["rule"] or None)
    try:
        results = rules_backtest(policy=what_if, days=v["days"])
        return {"policy": what_if, "result": results[what_if.rule], "rules": results}
    except DomainError as exc:
        form.add_error(None, exc.message)
        return None


def _review_page(request, *, exemption_form=None, status: int = 200):
    now = timezone.now()
    backtest_form = BacktestForm(request.GET if "days" in request.GET else None)
    context = {
        **review_context(now=now),
        "policy": policy(),
        "now": now,
        "backtest_form": backtest_form,
        "backtest": _backtest(backtest_form),
        "exemption_form": exemption_form or ExemptionForm(),
        "snooze_days": _snooze_days(),
    }
    return render(request, "reclaim/review.html", context, status=status)


@login_required
def review(request):
    require_admin(request.user)
    return _review_page(request)


@login_required
def recommendation_detail(request, pk: int):
    rec = _recommendation(pk)
    team = team_for_view(request.user, rec.reservation.team.slug)
    view = recommendation_view(recommendation=rec)
    return render(request, "reclaim/detail.html", {
        "v": view, "team": team, "can_act": can_act_for_team(request.user, team),
        "is_admin": is_admin(request.user), "now": timezone.now(), "snooze_days": _snooze_days(),
    })


def _admin_action(request, pk: int, act, done: str):
    """Run an admin action on a recommendation; a refusal is a message, never a 500."""
    require_admin(request.user)
    rec = _recommendation(pk)
    try:
        act(rec)
    except DomainError as exc:
        messages.error(request, f"Recommendation #{pk}: {exc.message}")
    else:
        messages.success(request, done.format(pk=pk))
    return _back(request)


def _back(request):
    """Back to the page the form was on (the review page or a recommendation's own)."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect("reclaim_review")


@login_required
@require_POST
def accept(request, pk: int):
    def act(rec):
        done = lifecycle.recommendation_accept(recommendation=rec, actor=request.user)
        messages.info(request, f"The leads of {done.reservation.team} are told; the GPUs go "
                      f"back at {timezone.localtime(done.grace_until):%Y-%m-%d %H:%M} unless "
                      "a lead objects.")

    return _admin_action(request, pk, act, "Recommendation #{pk} accepted.")


@login_required
@require_POST
def accept_bulk(request):
    require_admin(request.user)
    open_ids = list(Recommendation.objects.filter(status=R.OPEN).values_list("id", flat=True))
    form = BulkAcceptForm(request.POST, open_ids=open_ids)
    if not form.is_valid():
        messages.error(request, _errors(form))
        return redirect("reclaim_review")
    result = lifecycle.recommendations_accept_bulk(ids=form.cleaned_data["ids"],
                                                   actor=request.user)
    if result["accepted"]:
        messages.success(request, "Accepted: " + ", ".join(f"#{i}" for i in result["accepted"])
                         + ". The teams' leads are told.")
    for refused in result["refused"]:
        messages.error(request, f"#{refused['id']}: {refused['detail']}")
    return redirect("reclaim_review")


@login_required
@require_POST
def dismiss(request, pk: int):
    form = DismissForm(request.POST)

    def act(rec):
        if not form.is_valid():
            raise DomainError(_errors(form))
        lifecycle.recommendation_dismiss(recommendation=rec, actor=request.user,
                                         reason=form.cleaned_data["reason"],
                                         snooze=form.snooze())

    return _admin_action(request, pk, act, "Recommendation #{pk} dismissed.")


def _decision(request, pk: int, service, done: str):
    form = ReasonForm(request.POST)

    def act(rec):
        if not form.is_valid():
            raise DomainError(_errors(form))
        service(recommendation=rec, actor=request.user, reason=form.cleaned_data["reason"])

    return _admin_action(request, pk, act, done)


@login_required
@require_POST
def uphold(request, pk: int):
    return _decision(request, pk, lifecycle.recommendation_uphold,
                     "Objection to #{pk} overruled: the release goes ahead.")


@login_required
@require_POST
def withdraw(request, pk: int):
    return _decision(request, pk, lifecycle.recommendation_withdraw,
                     "Recommendation #{pk} withdrawn: the GPUs stay with the team.")


@login_required
@require_POST
def exemption_create(request):
    require_admin(request.user)
    form = ExemptionForm(request.POST)
    if form.is_valid():
        v = form.cleaned_data
        try:
            exemption = services.exemption_create(
                actor=request.user, reason=v["reason"], until=v["until"],
                reservation=v["reservation"], team=v["team"], gpu_class=v["gpu_class"])
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"{exemption} recorded.")
            return redirect("reclaim_review")
    messages.error(request, "The exemption was not recorded: " + _errors(form))
    return _review_page(request, exemption_form=form, status=400)


@login_required
@require_POST
def exemption_end(request, pk: int):
    require_admin(request.user)
    exemption = get_object_or_404(Exemption, pk=pk)
    try:
        services.exemption_end(exemption=exemption, actor=request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Exemption #{pk} ended: its reservations can be reclaimed.")
    return redirect("reclaim_review")


@login_required
@require_POST
def object_(request, pk: int):
    rec = _recommendation(pk)
    team = team_for_action(request.user, rec.reservation.team.slug)
    form = ObjectForm(request.POST)
    try:
        if not form.is_valid():
            raise DomainError(_errors(form))
        lifecycle.recommendation_object(recommendation=rec, actor=request.user,
                                        reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, f"Objection to #{pk}: {exc.message}")
    else:
        messages.success(request, f"Objection sent: nothing of #{rec.reservation_id} is "
                         "released until an admin decides.")
    return redirect("team_detail", slug=team.slug)


@login_required
@require_POST
def release_idle(request, pk: int):
    reservation = get_object_or_404(Reservation.objects.select_related("team"), pk=pk)
    team = team_for_action(request.user, reservation.team.slug)
    try:
        rec = lifecycle.reservation_release_idle(reservation=reservation, actor=request.user)
    except DomainError as exc:
        messages.error(request, f"Reservation #{pk}: {exc.message}")
    else:
        count = rec.gpu_rows.count()
        messages.success(request, f"Reservation #{pk}: {count} idle GPU"
                         f"{'' if count == 1 else 's'} given back; charges stop now.")
    return redirect("team_detail", slug=team.slug)
