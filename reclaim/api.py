"""Reclaim API under /api/v1/reclaim/: recommendations and their actions, a lead's
self-release, exemptions, the policy backtest and the fleet figures. Admins do
everything; leads object and self-release for their teams; members read their
teams'; anyone else gets 404. Errors in the one format of gpuquota.core.api."""

from datetime import timedelta

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import can_view_team, require_admin, team_for_view
from gpuquota.core.api import ERRORS, ErrorSerializer
from gpuquota.core.errors import DomainError
from gpuquota.reservations.api import reservation_for_view
from reclaim import lifecycle, services
from reclaim import serializers as s
from reclaim.backtest import rules_backtest
from reclaim.conf import policy
from reclaim.models import Exemption, Recommendation
from reclaim.selectors import reclaim_figures, recommendations_list

NOT_FOUND = {404: OpenApiResponse(ErrorSerializer, description="No such object (or not visible).")}


def recommendation_for_view(user, pk: int) -> Recommendation:
    """The recommendation if the caller may read its team's data; 404 otherwise."""
    rec = recommendations_list().filter(pk=pk).first()
    if rec is None or not can_view_team(user, rec.reservation.team):
        raise Http404("No such recommendation.")
    return rec


def _render(rec: Recommendation) -> Response:
    return Response(s.RecommendationSerializer(recommendations_list().get(pk=rec.pk)).data)


class RecommendationListView(generics.ListAPIView):
    """Recommendations the caller may read: over-quota reservations first, then by savings."""

    serializer_class = s.RecommendationSerializer

    def get_queryset(self):
        params = self.request.query_params
        status = params.getlist("status") or None
        if status and not set(status) <= set(Recommendation.Status.values):
            raise DomainError(f"One of {', '.join(Recommendation.Status.values)}.",
                              field="status")
        kind = params.get("kind")
        if "kind" in params and kind not in Recommendation.Kind.values:  # "kind=" too
            raise DomainError(f"One of {', '.join(Recommendation.Kind.values)}.", field="kind")
        team = team_for_view(self.request.user, params["team"]) if params.get("team") else None
        return recommendations_list(statuses=status, team=team, kind=kind,
                                    user=self.request.user)

    @extend_schema(parameters=[
        OpenApiParameter("status", str, many=True, enum=Recommendation.Status.values),
        OpenApiParameter("kind", str, enum=Recommendation.Kind.values),
        OpenApiParameter("team", str, description="team slug (404 if not visible)"),
    ], responses={200: s.RecommendationSerializer(many=True), 400: ERRORS[400], **NOT_FOUND})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class RecommendationDetailView(APIView):
    @extend_schema(responses={200: s.RecommendationSerializer, **NOT_FOUND})
    def get(self, request, pk: int):
        return _render(recommendation_for_view(request.user, pk))


class _AdminAction(APIView):
    """An admin's action: 404 for those who may not read it, 403 for readers."""

    input_serializer = s.DecisionReasonSerializer

    def act(self, rec, user, data):  # pragma: no cover - overridden
        raise NotImplementedError

    def post(self, request, pk: int):
        rec = recommendation_for_view(request.user, pk)
        data = self.input_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        self.act(rec, request.user, data.validated_data)
        return _render(rec)


def _schema(serializer, summary):
    return extend_schema(request=serializer, responses={200: s.RecommendationSerializer,
                                                        **ERRORS}, summary=summary)


class AcceptView(_AdminAction):
    @_schema(None, "Accept (admins): the leads are mailed; released after the grace period")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, rec, user, data):
        lifecycle.recommendation_accept(recommendation=rec, actor=user)


class DismissView(_AdminAction):
    input_serializer = s.DismissSerializer

    @_schema(s.DismissSerializer, "Dismiss with a reason (admins); quiet until the snooze ends")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, rec, user, data):
        lifecycle.recommendation_dismiss(recommendation=rec, actor=user, reason=data["reason"],
                                         snooze=data.get("snooze_s"))


class ObjectView(_AdminAction):
    input_serializer = s.ObjectionReasonSerializer

    @_schema(s.ObjectionReasonSerializer, "Object before the grace ends (the team's leads)")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, rec, user, data):
        lifecycle.recommendation_object(recommendation=rec, actor=user, reason=data["reason"])


class UpholdView(_AdminAction):
    @_schema(s.DecisionReasonSerializer, "Uphold an objection (admins): the release goes ahead")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, rec, user, data):
        lifecycle.recommendation_uphold(recommendation=rec, actor=user, reason=data["reason"])


class WithdrawView(_AdminAction):
    @_schema(s.DecisionReasonSerializer, "Withdraw after an objection (admins): the GPUs stay")
    def post(self, request, pk: int):
        return super().post(request, pk)

    def act(self, rec, user, data):
        lifecycle.recommendation_withdraw(recommendation=rec, actor=user, reason=data["reason"])


class BulkAcceptView(APIView):
    @extend_schema(request=s.BulkAcceptSerializer,
                   responses={200: s.BulkAcceptResultSerializer, **ERRORS},
                   summary="Accept several recommendations (admins); each refusal says why")
    def post(self, request):
        require_admin(request.user)
        data = s.BulkAcceptSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = lifecycle.recommendations_accept_bulk(ids=data.validated_data["ids"],
                                                       actor=request.user)
        return Response(s.BulkAcceptResultSerializer(result).data)


class ReleaseIdleView(APIView):
    @extend_schema(request=None, responses={200: s.RecommendationSerializer, **ERRORS},
                   summary="Give back now the idle GPUs recommended (the team's leads)")
    def post(self, request, pk: int):
        reservation = reservation_for_view(request.user, pk)
        rec = lifecycle.reservation_release_idle(reservation=reservation, actor=request.user)
        return _render(rec)


class ExemptionListView(APIView):
    @extend_schema(responses={200: s.ExemptionSerializer(many=True), **NOT_FOUND})
    def get(self, request):
        require_admin(request.user)
        qs = Exemption.objects.select_related("team", "gpu_class", "created_by")
        return Response(s.ExemptionSerializer(qs, many=True).data)

    @extend_schema(request=s.ExemptionCreateSerializer,
                   responses={201: s.ExemptionSerializer, **ERRORS},
                   summary="Exempt a reservation, or a team and class, until a date (admins)")
    def post(self, request):
        require_admin(request.user)
        data = s.ExemptionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        exemption = services.exemption_create(actor=request.user, **data.validated_data)
        return Response(s.ExemptionSerializer(exemption).data, status=201)


class ExemptionDetailView(APIView):
    def _get(self, request, pk: int) -> Exemption:
        require_admin(request.user)
        return get_object_or_404(Exemption, pk=pk)

    @extend_schema(responses={200: s.ExemptionSerializer, **NOT_FOUND})
    def get(self, request, pk: int):
        return Response(s.ExemptionSerializer(self._get(request, pk)).data)

    @extend_schema(request=s.ExemptionUpdateSerializer,
                   responses={200: s.ExemptionSerializer, **ERRORS})
    def patch(self, request, pk: int):
        exemption = self._get(request, pk)
        data = s.ExemptionUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        exemption = services.exemption_update(exemption=exemption, actor=request.user,
                                              **data.validated_data)
        return Response(s.ExemptionSerializer(exemption).data)

    @extend_schema(request=None, responses={200: s.ExemptionSerializer, **ERRORS},
                   summary="End the exemption now (it stays in the history)")
    def delete(self, request, pk: int):
        exemption = services.exemption_end(exemption=self._get(request, pk), actor=request.user)
        return Response(s.ExemptionSerializer(exemption).data)


class BacktestView(APIView):
    @extend_schema(parameters=[s.BacktestQuerySerializer],
                   responses={200: s.BacktestSerializer, **ERRORS},
                   summary="If this policy had run over the last N days; each rule's "
                           "false share (admins)")
    def get(self, request):
        require_admin(request.user)
        query = s.BacktestQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        v = query.validated_data

        def hours(name: str) -> timedelta | None:
            return timedelta(hours=v[name]) if name in v else None

        tuned = policy().override(
            idle_busy_fraction=v.get("idle_busy_fraction"), min_coverage=v.get("min_coverage"),
            lookback=hours("lookback_hours"), grace=hours("grace_hours"), rule=v.get("rule"),
            empty_lookback=hours("empty_lookback_hours"),
            held_lookback=hours("held_lookback_hours"))
        results = rules_backtest(policy=tuned, days=v["days"])
        return Response(s.BacktestSerializer(
            results[tuned.rule], context={"rules": s.rule_shares(results)}).data)


class FiguresView(APIView):
    @extend_schema(responses={200: s.FiguresSerializer, **NOT_FOUND},
                   summary="Reclaimable now; reclaimed and saved this month (admins)")
    def get(self, request):
        require_admin(request.user)
        return Response(s.FiguresSerializer(reclaim_figures()).data)
