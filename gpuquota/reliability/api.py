"""The reliability API under /api/v1/reliability/ (admins; 404 for anyone else): the
lemons and the figures at any `as_of` instant, so the detector can be replayed."""

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

ERRORS = {400: OpenApiResponse(ErrorSerializer, description="A bad `as_of` (naive, not a "
                               "date, in the future), `kind`, `group` or `days`."),
          404: OpenApiResponse(ErrorSerializer, description="Not an admin.")}


def as_of_parse(query: dict) -> datetime:
    now = timezone.now().replace(microsecond=0)
    as_of = query.get("as_of") or now
    if as_of > now:
        raise DomainError("The instant is in the future: nothing is known yet.", field="as_of")
    return as_of.replace(microsecond=0)


class LemonsView(APIView):
    @extend_schema(parameters=[s.ReliabilityLemonQuerySerializer],
                   responses={200: s.ReliabilityLemonListSerializer, **ERRORS},
                   summary="GPUs or nodes flagged as lemons at `as_of`: score, evidence, "
                           "first-flagged time (admins)")
    def get(self, request):
        require_admin(request.user)
        query = query_parse(s.ReliabilityLemonQuerySerializer, request)
        as_of = as_of_parse(query)
        flags = lemons(as_of=as_of, kind=query["kind"])
        return Response(s.ReliabilityLemonListSerializer(
            {"as_of": as_of, "kind": query["kind"], "flagged": flags}).data)


class FiguresView(APIView):
    @extend_schema(parameters=[s.ReliabilityFiguresQuerySerializer],
                   responses={200: s.ReliabilityFiguresListSerializer, **ERRORS},
                   summary="Failures per 1,000 GPU-days (95% interval), MTBF, MTTR, "
                           "availability per GPU, node, class or cluster (admins)")
    def get(self, request):
        require_admin(request.user)
        query = query_parse(s.ReliabilityFiguresQuerySerializer, request)
        as_of = as_of_parse(query)
        figures = reliability_figures(as_of=as_of, group=query["group"], days=query["days"])
        return Response(s.ReliabilityFiguresListSerializer(
            {"as_of": as_of, "group": query["group"], "days": query["days"],
             "figures": figures}).data)
