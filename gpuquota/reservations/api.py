"""REST API under /api/v1/: teams, GPU classes, availability, reservations, audit log.

Views parse input, ask accounts.permissions, call one service or selector, and
render; errors come out in the one format of gpuquota.core.api."""

from datetime import timedelta

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import can_view_team, require_admin, team_for_action, team_for_view
from accounts.selectors import teams_visible
from accounts.services import team_cost_center_set
from gpuquota.core.api import ERRORS, ErrorSerializer
from gpuquota.core.api_fields import query_parse
from gpuquota.core.errors import DomainError, NotFound
from gpuquota.core.idempotency import IDEMPOTENCY_KEY, idempotent_post
from gpuquota.reservations import serializers as s
from gpuquota.reservations import services, services_change
from gpuquota.reservations.conf import booking_horizon_end
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.selectors import (
    audit_visible,
    gpu_classes_reservable,
    reservation_with_gpus,
    reservations_visible,
    window_availability,
)
from gpuquota.reservations.services import horizon_check

KEY_REUSED = OpenApiResponse(ErrorSerializer, description="The Idempotency-Key was already "
                             "used for a different request (code idempotency_key_reused).")
LIST_FILTER_404 = OpenApiResponse(ErrorSerializer, description="The `team` filter names no "
                                  "team the caller can see.")


class TeamListView(generics.ListAPIView):
    """Teams the caller may see."""

    serializer_class = s.TeamSerializer

    def get_queryset(self):
        return teams_visible(user=self.request.user).order_by("name")


class TeamDetailView(APIView):
    """One team the caller may see; admins set its cost center."""

    @extend_schema(responses={200: s.TeamSerializer, 404: ERRORS[404]})
    def get(self, request, slug: str):
        return Response(s.TeamSerializer(team_for_view(request.user, slug)).data)

    @extend_schema(request=s.TeamChangeSerializer,
                   responses={200: s.TeamSerializer, 400: ERRORS[400], 403: ERRORS[403],
                              404: ERRORS[404]},
                   description="Admins: the team's cost center, which the next draft of each "
                   "open month carries (approved statements keep theirs), and its owner's "
                   "email, copied on the team's statement mail. Audited.")
    def patch(self, request, slug: str):
        team = team_for_view(request.user, slug)
        data = s.TeamChangeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = team_cost_center_set(team=team, cost_center=values.get("cost_center"),
                                    owner_email=values.get("cost_center_owner_email"),
                                    actor=request.user)
        return Response(s.TeamSerializer(team).data)


class GpuClassListView(generics.ListAPIView):
    """GPU classes with GPUs in service."""

    serializer_class = s.GpuClassSerializer

    def get_queryset(self):
        return gpu_classes_reservable()


class AvailabilityView(APIView):
    """Free GPUs per class over a window (default: the coming 14 days)."""

    @extend_schema(
        parameters=[s.AvailabilityQuerySerializer],
        responses={200: s.AvailabilitySerializer(many=True), 400: ERRORS[400]},
    )
    def get(self, request):
        query = query_parse(s.AvailabilityQuerySerializer, request)
        now = timezone.now().replace(microsecond=0)
        start = query.get("start") or now
        horizon_check(instant=start, now=now, field="start")
        end = query.get("end") or min(start + timedelta(days=14), booking_horizon_end(now=now))
        horizon_check(instant=end, now=now, field="end")
        if end <= start:
            raise DomainError("The end must be after the start.", field="end")
        gpu_class = query.get("gpu_class")
        classes = [gpu_class] if gpu_class else gpu_classes_reservable()
        rows = [window_availability(gpu_class=c, start=start, end=end) for c in classes]
        return Response(s.AvailabilitySerializer(rows, many=True).data)


def reservation_for_view(user, pk: int) -> Reservation:
    """The reservation if the caller may see its team; 404 otherwise."""
    reservation = get_object_or_404(Reservation.objects.select_related("team", "gpu_class"), pk=pk)
    if not can_view_team(user, reservation.team):
        raise Http404("No such reservation.")
    return reservation


def _render(reservation: Reservation, code=status.HTTP_200_OK) -> Response:
    fresh = reservation_with_gpus(pk=reservation.pk)
    return Response(s.ReservationSerializer(fresh).data, status=code)


class ReservationListView(generics.ListCreateAPIView):
    """Reservations of the caller's teams (all for admins); leads and admins create."""

    serializer_class = s.ReservationSerializer

    def get_queryset(self):
        query = query_parse(s.ReservationFilterSerializer, self.request)
        qs = reservations_visible(user=self.request.user)
        if slug := query.get("team"):
            qs = qs.filter(team=team_for_view(self.request.user, slug))
        if state := query.get("status"):
            qs = qs.filter(status=state)
        return qs

    @extend_schema(parameters=[s.ReservationFilterSerializer], responses={
        200: s.ReservationSerializer(many=True), 400: ERRORS[400], 404: LIST_FILTER_404})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=s.ReservationCreateSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: s.ReservationSerializer, **ERRORS, 422: KEY_REUSED},
        description="In quota: scheduled with GPUs assigned. Over quota: pending (holds "
        "nothing) until an admin decides. No capacity: 409 saying how many GPUs are free "
        "and when enough next are. Times need an offset or Z.",
    )
    @idempotent_post
    def post(self, request, *args, **kwargs):
        data = s.ReservationCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            team = team_for_action(request.user, v["team"])
        except Http404 as exc:
            raise NotFound("No such team among those you can see.", field="team") from exc
        reservation = services.reservation_create(
            team=team, gpu_class=v["gpu_class"], count=v["count"], start=v["start"],
            end=v["end"], placement=v["placement"], purpose=v["purpose"],
            requested_by=request.user,
        )
        return _render(reservation, status.HTTP_201_CREATED)


class ReservationDetailView(APIView):
    """One reservation with its GPUs."""

    @extend_schema(responses={200: s.ReservationSerializer, 404: ERRORS[404]})
    def get(self, request, pk: int):
        return _render(reservation_for_view(request.user, pk))


class _TeamActionView(APIView):
    input_serializer = s.ReasonSerializer

    def act(self, reservation, user, data):  # pragma: no cover - overridden
        raise NotImplementedError

    def post(self, request, pk: int):
        reservation = reservation_for_view(request.user, pk)
        team_for_action(request.user, reservation.team.slug)
        data = self.input_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        self.act(reservation, request.user, data.validated_data)
        return _render(reservation)


def _action_schema(serializer, summary):
    return extend_schema(request=serializer, responses={200: s.ReservationSerializer, **ERRORS},
                         summary=summary)


class ReleaseView(_TeamActionView):
    @_action_schema(s.ReasonSerializer, "Release every GPU of an active reservation now")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, reservation, user, data):
        services.reservation_release(reservation=reservation, actor=user, reason=data["reason"])


class CancelView(_TeamActionView):
    @_action_schema(s.ReasonSerializer, "Cancel before the start (zero seconds charged)")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, reservation, user, data):
        services.reservation_cancel(reservation=reservation, actor=user, reason=data["reason"])


class ExtendView(_TeamActionView):
    input_serializer = s.ExtendSerializer

    @_action_schema(s.ExtendSerializer, "Move the end later (before the effective end)")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, reservation, user, data):
        services_change.reservation_extend(reservation=reservation, actor=user, end=data["end"],
                                           reason=data["reason"])


class ShrinkView(_TeamActionView):
    input_serializer = s.ShrinkSerializer

    @_action_schema(s.ShrinkSerializer, "Keep `count` GPUs and give the others back now")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, reservation, user, data):
        services_change.reservation_shrink(reservation=reservation, actor=user,
                                           count=data["count"], reason=data["reason"])


class SwapView(_TeamActionView):
    input_serializer = s.SwapSerializer

    @_action_schema(s.SwapSerializer, "Replace one held GPU by another of the same class")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, reservation, user, data):
        services_change.reservation_swap_gpu(
            reservation=reservation, actor=user, gpu=data["gpu"],
            replacement=data["replacement"], reason=data["reason"])


class ApproveView(APIView):
    @_action_schema(s.ReasonSerializer, "Approve a pending request (admins)")
    def post(self, request, pk: int):
        require_admin(request.user)
        data = s.ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reservation = get_object_or_404(Reservation, pk=pk)
        services.reservation_approve(reservation=reservation, actor=request.user,
                                     reason=data.validated_data["reason"])
        return _render(reservation)


class DenyView(APIView):
    @_action_schema(s.DenySerializer, "Deny a pending request with a reason (admins)")
    def post(self, request, pk: int):
        require_admin(request.user)
        data = s.DenySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reservation = get_object_or_404(Reservation, pk=pk)
        services.reservation_deny(reservation=reservation, actor=request.user,
                                  reason=data.validated_data["reason"])
        return _render(reservation)


class AuditListView(generics.ListAPIView):
    """The audit log: admins see all; leads and members their teams' entries."""

    serializer_class = s.AuditEntrySerializer

    def get_queryset(self):
        query = query_parse(s.AuditFilterSerializer, self.request)
        qs = audit_visible(user=self.request.user)
        if slug := query.get("team"):
            qs = qs.filter(team=team_for_view(self.request.user, slug))
        return qs

    @extend_schema(parameters=[s.AuditFilterSerializer], responses={
        200: s.AuditEntrySerializer(many=True), 400: ERRORS[400], 404: LIST_FILTER_404})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
