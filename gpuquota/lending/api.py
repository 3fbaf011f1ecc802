"""Lending API under /api/v1/lending/: loans (list, detail, return), lend now, the pool of
lent GPUs, opt-outs, returns with their time-to-return, and the policy. As for reclaim:
admins do everything; the reserving team's leads lend, return and opt out for it; its
members read; anyone else gets 404 for a team's objects. Errors in the one format of
gpuquota.core.api."""

from datetime import timedelta

from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Membership
from accounts.permissions import can_act_for_team, can_view_team, require_admin, team_for_view
from accounts.selectors import memberships_current, teams_visible
from gpuquota.core.api import ERRORS
from gpuquota.core.api_fields import query_parse
from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.idempotency import IDEMPOTENCY_KEY, idempotent_post
from gpuquota.inventory.models import GpuClass
from gpuquota.lending import conf, optouts, services
from gpuquota.lending import serializers as s
from gpuquota.lending.models import LendingOptOut
from gpuquota.lending.selectors import loans_list, optouts_list, returns_list, time_to_return
from gpuquota.reservations.api import KEY_REUSED, reservation_for_view
from gpuquota.reservations.models import Loan

ACT_DENIED = "Only the reserving team's leads and admins can do this."


def loan_for_view(user, pk: int) -> Loan:
    """The loan if the caller may read the reserving team's data; 404 otherwise."""
    loan = loans_list().filter(pk=pk).first()
    if loan is None or not can_view_team(user, loan.assignment.reservation.team):
        raise Http404("No such loan.")
    return loan


def _require_act(user, team) -> None:
    if not can_act_for_team(user, team):
        raise PermissionDenied(ACT_DENIED)


def _leads(user, team) -> bool:
    return memberships_current(user=user).filter(team=team,
                                                 role=Membership.Role.LEAD).exists()


class LoanListView(generics.ListAPIView):
    """Loans of the teams the caller may read, newest first."""

    serializer_class = s.LoanSerializer

    def get_queryset(self):
        query = query_parse(s.LoanQuerySerializer, self.request)
        user = self.request.user
        teams = teams_visible(user=user)
        if query.get("team"):
            teams = teams.filter(pk=team_for_view(user, query["team"]).pk)
        return loans_list(teams=teams, state=query.get("state"))

    @extend_schema(parameters=[s.LoanQuerySerializer],
                   responses={200: s.LoanSerializer(many=True), 400: ERRORS[400],
                              404: ERRORS[404]})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class LoanDetailView(APIView):
    @extend_schema(responses={200: s.LoanSerializer, 404: ERRORS[404]})
    def get(self, request, pk: int):
        return Response(s.LoanSerializer(loan_for_view(request.user, pk)).data)


class LoanReturnView(APIView):
    @extend_schema(request=s.ReturnSerializer, responses={200: s.LoanSerializer, **ERRORS},
                   summary="Return a lent GPU now (the reserving team's leads, admins); the "
                           "borrowers are preempted within LEND_RETURN_NOTICE_S")
    def post(self, request, pk: int):
        loan = loan_for_view(request.user, pk)
        team = loan.assignment.reservation.team
        _require_act(request.user, team)
        data = s.ReturnSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.loan_return_by(loan=loan, actor=request.user,
                                is_owner_lead=_leads(request.user, team),
                                note=data.validated_data.get("note", ""))
        return Response(s.LoanSerializer(loan_for_view(request.user, pk)).data)


class LendNowView(APIView):
    @extend_schema(request=s.LendNowSerializer, parameters=[IDEMPOTENCY_KEY],
                   responses={201: s.LoanSerializer, **ERRORS, 422: KEY_REUSED},
                   summary="Lend a GPU of an active reservation now (its team's leads, admins)")
    @idempotent_post
    def post(self, request):
        data = s.LendNowSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        reservation = reservation_for_view(request.user, v["reservation"])
        _require_act(request.user, reservation.team)
        loan = services.reservation_lend_now(reservation=reservation, actor=request.user,
                                             gpu_uuid=v.get("gpu"), reason=v.get("reason", ""))
        return Response(s.LoanSerializer(loan_for_view(request.user, loan.pk)).data, status=201)


class PoolView(APIView):
    @extend_schema(responses={200: s.PoolGpuSerializer(many=True)},
                   summary="The GPUs lent now, where preemptible work may run (any signed-in "
                           "user; `advisory`: the cluster has no scheduler backend)")
    def get(self, request):
        return Response(s.PoolGpuSerializer(loans_list(state="open"), many=True).data)


class ReturnsView(APIView):
    @extend_schema(parameters=[s.ReturnsQuerySerializer],
                   responses={200: s.ReturnFiguresSerializer, **ERRORS},
                   summary="Returns in [start, end) (default the last 30 days) and their "
                           "time-to-return p50/p95/p99, nearest rank (admins)")
    def get(self, request):
        require_admin(request.user)
        query = query_parse(s.ReturnsQuerySerializer, request)
        end = query.get("end") or timezone.now().replace(microsecond=0)
        start = query.get("start") or end - timedelta(days=30)
        if end <= start:
            raise DomainError("Must be after start.", field="end")
        figures = time_to_return(start=start, end=end)
        return Response(s.ReturnFiguresSerializer({
            "start": start, "end": end, "returns": figures.returns, "p50_s": figures.p50_s,
            "p95_s": figures.p95_s, "p99_s": figures.p99_s,
            "loans": returns_list(start=start, end=end)[:500]}).data)


class PolicyView(APIView):
    @extend_schema(responses={200: s.PolicySerializer}, summary="The lending policy in force")
    def get(self, request):
        return Response(s.PolicySerializer({
            "enabled": conf.lending_enabled(), "lend_after_idle_s": conf.lend_after_idle_s(),
            "return_notice_s": conf.lend_return_notice_s(),
            "scan_interval_s": conf.scan_interval_s()}).data)


def optout_for_view(user, pk: int) -> LendingOptOut:
    optout = optouts_list().filter(pk=pk).first()
    if optout is None or not can_view_team(user, optout.team):
        raise Http404("No such opt-out.")
    return optout


class OptOutListView(APIView):
    @extend_schema(parameters=[s.OptOutQuerySerializer],
                   responses={200: s.OptOutSerializer(many=True), 400: ERRORS[400]})
    def get(self, request):
        live = query_parse(s.OptOutQuerySerializer, request)["live"]
        rows = optouts_list(teams=teams_visible(user=request.user), live_only=live)
        return Response(s.OptOutSerializer(rows, many=True).data)

    @extend_schema(request=s.OptOutCreateSerializer, responses={201: s.OptOutSerializer,
                                                                **ERRORS},
                   summary="Turn lending off for a reservation, or a team and class (its "
                           "leads, admins); what is lent under it returns now")
    def post(self, request):
        data = s.OptOutCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if v["scope"] == LendingOptOut.Scope.RESERVATION:
            reservation = reservation_for_view(request.user, v["reservation"])
            _require_act(request.user, reservation.team)
            optout = optouts.optout_create(actor=request.user, reservation=reservation,
                                           reason=v["reason"])
        else:
            team = team_for_view(request.user, v["team"])
            _require_act(request.user, team)
            gpu_class = GpuClass.objects.filter(name=v["gpu_class"]).first()
            if gpu_class is None:
                raise DomainError("No such GPU class.", field="gpu_class")
            optout = optouts.optout_create(actor=request.user, team=team, gpu_class=gpu_class,
                                           reason=v["reason"])
        return Response(s.OptOutSerializer(optout).data, status=201)


class OptOutEndView(APIView):
    @extend_schema(request=None, responses={200: s.OptOutSerializer, **ERRORS},
                   summary="Turn lending on again (the team's leads, admins)")
    def post(self, request, pk: int):
        optout = optout_for_view(request.user, pk)
        _require_act(request.user, optout.team)
        return Response(s.OptOutSerializer(
            optouts.optout_end(optout=optout, actor=request.user)).data)
