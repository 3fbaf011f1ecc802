"""Lending pages: the admin's page (pool, loans, returns), and the team's actions (return
now, opt out and back in). Views parse, ask accounts.permissions, call one service,
render; a refusal is a message, never a 500."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.models import Membership
from accounts.permissions import can_view_team, require_admin, team_for_action
from accounts.selectors import memberships_current
from gpuquota.core.errors import DomainError
from gpuquota.lending import optouts, services
from gpuquota.lending.forms import ReturnsPeriodForm
from gpuquota.lending.pages import admin_lending_context, optout_form
from gpuquota.lending.selectors import loans_list, optouts_list
from gpuquota.reservations.models import Reservation


@login_required
def lending_admin(request):
    require_admin(request.user)
    form = ReturnsPeriodForm(request.GET or None)
    valid = not form.is_bound or form.is_valid()
    days = (form.cleaned_data.get("days") if form.is_bound and valid else None) or 30
    context = admin_lending_context(now=timezone.now().replace(microsecond=0), days=days)
    return render(request, "lending/admin.html", {**context, "period_form": form},
                  status=200 if valid else 400)


def _team_page(team):
    return redirect("team_detail", slug=team.slug)


@login_required
@require_POST
def loan_return(request, pk: int):
    loan = loans_list().filter(pk=pk).first()
    if loan is None or not can_view_team(request.user, loan.assignment.reservation.team):
        raise Http404("No such loan.")
    team = team_for_action(request.user, loan.assignment.reservation.team.slug)
    is_lead = memberships_current(user=request.user).filter(
        team=team, role=Membership.Role.LEAD).exists()
    try:
        services.loan_return_by(loan=loan, actor=request.user, is_owner_lead=is_lead)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{loan.gpu.node.hostname}/{loan.gpu.index} is coming back: "
                         "its borrowers are preempted within the notice.")
    if request.POST.get("next") == "admin":
        return redirect("lending_admin")
    return _team_page(team)


@login_required
@require_POST
def lend_now(request, pk: int):
    reservation = Reservation.objects.select_related("team").filter(pk=pk).first()
    if reservation is None or not can_view_team(request.user, reservation.team):
        raise Http404("No such reservation.")
    team = team_for_action(request.user, reservation.team.slug)
    try:
        loan = services.reservation_lend_now(reservation=reservation, actor=request.user)
    except DomainError as exc:
        messages.error(request, f"Reservation #{reservation.pk}: {exc.message}")
    else:
        messages.success(request, f"{loan.gpu.node.hostname}/{loan.gpu.index} is lent until "
                         "you return it.")
    return _team_page(team)


@login_required
@require_POST
def optout_create(request, slug: str):
    team = team_for_action(request.user, slug)
    form = optout_form(team=team, data=request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(m for ms in form.errors.values() for m in ms))
        return _team_page(team)
    try:
        optouts.optout_create(actor=request.user, team=team, reason=form.cleaned_data["reason"],
                              **form.target_objects())
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Lending is off for it; anything lent under it is returned.")
    return _team_page(team)


@login_required
@require_POST
def optout_end(request, pk: int):
    optout = optouts_list().filter(pk=pk).first()
    if optout is None or not can_view_team(request.user, optout.team):
        raise Http404("No such opt-out.")
    team = team_for_action(request.user, optout.team.slug)
    optouts.optout_end(optout=optout, actor=request.user)
    messages.success(request, "Lending is on again.")
    if request.POST.get("next") == "admin":
        return redirect("lending_admin")
    return _team_page(team)
