"""Pages: team page, reservation form with availability, team actions, admin queue,
backfill and maintenance. Views parse, ask accounts.permissions, call one service."""

import uuid
from datetime import timedelta
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.permissions import (
    can_act_for_team,
    is_admin,
    is_lead_anywhere,
    require_admin,
    team_for_action,
    team_for_view,
)
from accounts.selectors import team_members, teams_led
from gpuquota.core.errors import DomainError
from gpuquota.core.idempotency import FORM_FIELD, KeyReused, form_submit_once
from gpuquota.core.sections import page_sections
from gpuquota.core.timeutil import month_of
from gpuquota.reservations import services, services_change
from gpuquota.reservations.forms import (
    DecideForm,
    ExtendForm,
    MaintenanceForm,
    ReservationForm,
    WindowCheckForm,
)
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.room import request_room, room_summary, room_verdict
from gpuquota.reservations.selectors import (
    availability,
    maintenance_blocks_recent,
    quota_usage,
    reservations_pending,
    team_reservations,
    window_availability,
)


def _user_tz(request) -> ZoneInfo:
    return ZoneInfo(request.user.timezone or "UTC")


def _form_error(form, exc: DomainError) -> None:
    field = exc.field if exc.field in form.fields else None
    form.add_error(field, exc.message)


def _gpus_text(reservation: Reservation) -> str:
    rows = reservation.assignments.select_related("gpu__node").order_by("gpu__node__hostname",
                                                                        "gpu__index")
    return ", ".join(f"{a.gpu.node.hostname}/{a.gpu.index}" for a in rows)


@login_required
def team_detail(request, slug: str):
    team = team_for_view(request.user, slug)
    now = timezone.now()
    try:
        month = month_of(text=request.GET.get("month"), now=now)
    except DomainError as exc:
        messages.error(request, exc.message)
        month = month_of(text=None, now=now)
    can_act = can_act_for_team(request.user, team)
    context = {
        "team": team,
        "can_act": can_act,
        "members": team_members(team=team),
        "quota_usage": quota_usage(team=team, at=now),
        "reservations": team_reservations(team=team, now=now,
                                          past_page=request.GET.get("past") or 1),
        "extend_form": ExtendForm(),
        "now": now,
        "month": month,
        "sections": page_sections("team", team=team, user=request.user, can_act=can_act,
                                  month=month, now=now),
    }
    return render(request, "reservations/team_detail.html", context)


def _reservation_form_page(request, *, backfill: bool):
    teams = teams_led(user=request.user).order_by("name")
    initial = {}
    if slug := request.GET.get("team"):
        initial["team"] = teams.filter(slug=slug).first()
    initial.update(_default_window())
    form = ReservationForm(request.POST or None, teams=teams, initial=initial)
    context = {}
    if request.method == "POST" and form.is_valid():
        try:
            done = form_submit_once(request, lambda: _reservation_submit(request, form))
        except KeyReused:
            form.add_error(None, "This form was already sent with other values; it has been "
                           "renewed: check it and send it again.")
            context[FORM_FIELD] = uuid.uuid4().hex
        else:
            if done is not None:
                return done
    grid_team = _grid_team(teams, form["team"].value())
    context |= {
        "form": form,
        "backfill": backfill,
        "availability": availability(tz=_user_tz(request), team=grid_team),
        "grid_team": grid_team,
        "current_year": timezone.localdate().year,
        "tz": request.user.timezone,
    }
    return render(request, "reservations/reservation_form.html", context)


def _reservation_submit(request, form):
    """The reservation of a valid form, and the redirect to its team; None with the
    refusal on the form."""
    v = form.cleaned_data
    team = team_for_action(request.user, v["team"].slug)
    try:
        reservation = services.reservation_create(
            team=team, gpu_class=v["gpu_class"], count=v["count"], start=v["start"],
            end=v["end"], placement=v["placement"], purpose=v["purpose"],
            requested_by=request.user,
        )
    except DomainError as exc:
        _form_error(form, exc)
        return None
    if reservation.status == Reservation.Status.PENDING:
        messages.warning(request, f"Request #{reservation.pk} is over {team}'s quota: it "
                         "is pending until an admin approves it. It holds no GPUs yet.")
    else:
        messages.success(request, f"Reservation #{reservation.pk}: {reservation.count} × "
                         f"{reservation.gpu_class} — {_gpus_text(reservation)}.")
    return redirect("team_detail", slug=team.slug)


def _default_window() -> dict:
    """The form's first window: from the next quarter hour, for a day."""
    now = timezone.localtime().replace(second=0, microsecond=0)
    start = now + timedelta(minutes=15 - now.minute % 15)
    return {"start": start, "end": start + timedelta(days=1)}


def _grid_team(teams, value):
    """The team whose quota the grid counts: the one picked (first led by default)."""
    team = teams.filter(pk=value).first() if str(value or "").isdigit() else None
    return team or teams.first()


@login_required
def availability_grid(request):
    """The availability grid alone, for the team picked in the form (?team=<id>)."""
    if not is_lead_anywhere(request.user):
        return render(request, "reservations/not_a_lead.html", status=403)
    grid_team = _grid_team(teams_led(user=request.user).order_by("name"),
                           request.GET.get("team"))
    return render(request, "reservations/_availability.html", {
        "availability": availability(tz=_user_tz(request), team=grid_team),
        "grid_team": grid_team, "current_year": timezone.localdate().year})


@login_required
def reservation_new(request):
    if not is_lead_anywhere(request.user):
        return render(request, "reservations/not_a_lead.html", status=403)
    return _reservation_form_page(request, backfill=False)


@login_required
def window_check(request):
    """JSON for the form's live hint: GPUs free over the typed window, or why the
    window cannot be read (DST, end before start); with a team and a count, what the
    team can get within and beyond its quota and what submitting would do."""
    if not is_lead_anywhere(request.user):
        return JsonResponse({"error": "Only team leads and admins can reserve."}, status=403)
    form = WindowCheckForm(request.GET, teams=teams_led(user=request.user),
                           may_backfill=is_admin(request.user))
    if not form.is_valid():
        # A window being typed is not a failed request: the hint shows why (200), and the
        # browser logs no error for each keystroke.
        errors = {field: " ".join(messages_) for field, messages_ in form.errors.items()}
        return JsonResponse({"errors": errors})
    v = form.cleaned_data
    found = window_availability(gpu_class=v["gpu_class"], start=v["start"], end=v["end"])
    body = {"free_gpus": found["free_gpus"], "total_gpus": found["total_gpus"],
            "gpu_class": found["gpu_class"]}
    if v["team"] is not None and v["start"] >= timezone.now() - services.LEAD_START_TOLERANCE:
        room = request_room(team=v["team"], gpu_class=v["gpu_class"], start=v["start"],
                            end=v["end"], same_node=v["placement"] == "same_node")
        body.update(within_quota=room.within_quota, beyond_quota=room.beyond_quota,
                    quota_left=room.quota_left, ceiling=room.ceiling,
                    room_message=room_summary(room=room, team_name=v["team"].name))
        if v["count"]:
            verdict = room_verdict(room=room, count=v["count"], team_name=v["team"].name,
                                   class_name=v["gpu_class"].name)
            body.update(verdict=verdict.kind, verdict_message=verdict.message)
    return JsonResponse(body)


@login_required
def reservation_backfill(request):
    require_admin(request.user)
    return _reservation_form_page(request, backfill=True)


def _team_action(request, pk: int, action) -> object:
    reservation = get_object_or_404(Reservation.objects.select_related("team"), pk=pk)
    team = team_for_action(request.user, reservation.team.slug)
    try:
        action(reservation)
    except DomainError as exc:
        messages.error(request, f"Reservation #{pk}: {exc.message}")
    return redirect("team_detail", slug=team.slug)


@login_required
@require_POST
def reservation_release_view(request, pk: int):
    def act(reservation):
        services.reservation_release(reservation=reservation, actor=request.user,
                                     reason=request.POST.get("reason", ""))
        messages.success(request, f"Reservation #{pk} released: its GPUs are free from now.")

    return _team_action(request, pk, act)


@login_required
@require_POST
def reservation_cancel_view(request, pk: int):
    def act(reservation):
        services.reservation_cancel(reservation=reservation, actor=request.user,
                                    reason=request.POST.get("reason", ""))
        messages.success(request, f"Reservation #{pk} cancelled; nothing is charged.")

    return _team_action(request, pk, act)


@login_required
@require_POST
def reservation_extend_view(request, pk: int):
    def act(reservation):
        form = ExtendForm(request.POST)
        if not form.is_valid():
            raise DomainError(" ".join(m for ms in form.errors.values() for m in ms), field="end")
        extended = services_change.reservation_extend(
            reservation=reservation, actor=request.user, end=form.cleaned_data["end"])
        messages.success(request, f"Reservation #{pk} now ends "
                         f"{timezone.localtime(extended.end):%Y-%m-%d %H:%M}.")

    return _team_action(request, pk, act)


@login_required
def pending_queue(request):
    require_admin(request.user)
    return render(request, "reservations/pending_queue.html",
                  {"pending": reservations_pending(), "form": DecideForm()})


@login_required
@require_POST
def reservation_decide(request, pk: int):
    require_admin(request.user)
    reservation = get_object_or_404(Reservation, pk=pk)
    form = DecideForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve or deny.")
        return redirect("reservation_pending")
    decision, reason = form.cleaned_data["decision"], form.cleaned_data["reason"]
    try:
        if decision == "approve":
            services.reservation_approve(reservation=reservation, actor=request.user,
                                         reason=reason)
            messages.success(request, f"Request #{pk} approved: {_gpus_text(reservation)}.")
        else:
            services.reservation_deny(reservation=reservation, actor=request.user, reason=reason)
            messages.success(request, f"Request #{pk} denied.")
    except DomainError as exc:
        messages.error(request, f"Request #{pk}: {exc.message}")
    return redirect("reservation_pending")


@login_required
def maintenance_new(request):
    require_admin(request.user)
    form = MaintenanceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        v = form.cleaned_data
        try:
            services_change.maintenance_block_create(
                gpu=v["gpu"], start=v["start"], end=v["end"], reason=v["reason"],
                actor=request.user)
        except DomainError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"{v['gpu'].node.hostname}/GPU {v['gpu'].index} is "
                             "blocked for maintenance.")
            return redirect("maintenance_new")
    return render(request, "reservations/maintenance.html",
                  {"form": form, "blocks": maintenance_blocks_recent()})
