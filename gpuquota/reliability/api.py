"""The reliability API under /api/v1/reliability/ (admins; 404 for anyone else): the
lemons and the figures. Without `as_of` they are the latest snapshot's (the
`reliability.figures` task's, `as_of` in the answer says when); with `as_of` (or another
`days`) the history is replayed on request, so the detector can be replayed: that costs
seconds on a large fleet (docs/benchmarks.md#fleet-scale), so replays are rate-limited per
admin (`ReplayRateThrottle`)."""

from datetime import datetime

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import require_admin
from gpuquota.core.api import ErrorSerializer
from gpuquota.core.api_fields import query_parse
from gpuquota.core.errors import DomainError
from gpuquota.reliability import serializers as s
from gpuquota.reliability.lemons import lemons
from gpuquota.reliability.selectors import reliability_figures
from gpuquota.reliability.snapshot import DAYS, reliability_figures_latest, snapshot_figures
from gpuquota.reliability.throttling import ReplayRateThrottle

ERRORS = {400: OpenApiResponse(ErrorSerializer, description="A bad `as_of` (naive, not a "
                               "date, in the future), `kind`, `group` or `days`."),
          404: OpenApiResponse(ErrorSerializer, description="Not an admin."),
          429: OpenApiResponse(ErrorSerializer, description="Too many replays (`as_of` or "
                               "another `days`) in a minute.")}


def as_of_parse(query: dict) -> datetime | None:
    """The instant to replay at; None: the latest snapshot's."""
    now = timezone.now().replace(microsecond=0)
    as_of = query.get("as_of")
    if as_of is not None and as_of > now:
        raise DomainError("The instant is in the future: nothing is known yet.", field="as_of")
    return as_of and as_of.replace(microsecond=0)


class LemonsView(APIView):
    throttle_classes = [*APIView.throttle_classes, ReplayRateThrottle]

    @extend_schema(parameters=[s.ReliabilityLemonQuerySerializer],
                   responses={200: s.ReliabilityLemonListSerializer, **ERRORS},
                   summary="GPUs or nodes flagged as lemons at `as_of`: score, evidence, "
                           "first-flagged time (admins)")
    def get(self, request):
        require_admin(request.user)
        query = query_parse(s.ReliabilityLemonQuerySerializer, request)
        as_of = as_of_parse(query)
        if as_of is None:
            snapshot = reliability_figures_latest(now=timezone.now().replace(microsecond=0))
            as_of = snapshot.as_of
            flags = snapshot.gpu_lemons if query["kind"] == "gpu" else snapshot.node_lemons
        else:
            flags = lemons(as_of=as_of, kind=query["kind"])
        return Response(s.ReliabilityLemonListSerializer(
            {"as_of": as_of, "kind": query["kind"], "flagged": flags}).data)


class FiguresView(APIView):
    throttle_classes = [*APIView.throttle_classes, ReplayRateThrottle]

    @extend_schema(parameters=[s.ReliabilityFiguresQuerySerializer],
                   responses={200: s.ReliabilityFiguresListSerializer, **ERRORS},
                   summary="Failures per 1,000 GPU-days (95% interval), MTBF, MTTR, "
                           "availability per GPU, node, class or cluster (admins)")
    def get(self, request):
        require_admin(request.user)
        query = query_parse(s.ReliabilityFiguresQuerySerializer, request)
        as_of, group = as_of_parse(query), query["group"]
        if as_of is None and query["days"] == DAYS:
            snapshot = reliability_figures_latest(now=timezone.now().replace(microsecond=0))
            as_of = snapshot.as_of
            figures = snapshot_figures(snapshot=snapshot, group=group)
        else:
            as_of = as_of or timezone.now().replace(microsecond=0)
            figures = reliability_figures(as_of=as_of, group=group, days=query["days"])
        return Response(s.ReliabilityFiguresListSerializer(
            {"as_of": as_of, "group": query["group"], "days": query["days"],
             "figures": figures}).data)
