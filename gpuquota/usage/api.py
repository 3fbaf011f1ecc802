"""The usage API under /api/v1/usage/: utilization versus allocation (accounting.md)
for any exact period, from the exact selectors (edges from the raw samples), in the
units of the glossary. Read-only. Fleet figures: any signed-in user, as the
utilization page shows them (unreserved time per owner team: admins only); a team's
figures: its members and leads, and admins (404 for anyone else)."""

from datetime import datetime, timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import is_admin, team_for_view
from gpuquota.core.api import ErrorSerializer
from gpuquota.core.api_fields import query_parse
from gpuquota.core.errors import DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.timeutil import Period
from gpuquota.usage import api_serializers as s
from gpuquota.usage.conf import busy_util_percent
from gpuquota.usage.daily import daily_usage
from gpuquota.usage.selectors import (
    classes_utilization,
    fleet_utilization,
    team_reservations_utilization,
    team_utilization,
    unreserved_busy_hours_named,
)

MAX_PERIOD = timedelta(days=366)
ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="A missing or bad `start`/`end`, an end "
                         "not after the start, a period over 366 days or starting in the "
                         "future, or (`period`) edges older than the raw samples kept that are "
                         "not whole UTC hours."),
}
TEAM_404 = OpenApiResponse(ErrorSerializer, description="No such team (or not visible).")


def usage_period(*, start: datetime, end: datetime, now: datetime) -> Period:
    """The period asked for, to date: whole seconds, end after start, at most
    `MAX_PERIOD` long, not starting in the future; a DomainError naming the field."""
    for name, instant in (("start", start), ("end", end)):
        if instant.microsecond:
            raise DomainError("Give whole seconds (accounting counts whole seconds).",
                              field=name)
    if end <= start:
        raise DomainError("The end must be after the start.", field="end")
    if end - start > MAX_PERIOD:
        raise DomainError(f"At most {MAX_PERIOD.days} days per request.", field="end")
    if start >= now:
        raise DomainError("The start is in the future: nothing has happened yet.",
                          field="start")
    return Period(start, end).to_date(now)


def _query(request) -> tuple[Period, bool]:
    query = query_parse(s.UsageQuerySerializer, request)
    period = usage_period(start=query["start"], end=query["end"],
                          now=whole_second(timezone.now()))
    return period, query["by"] == "day"


def _head(period: Period) -> dict:
    return {"start": period.start, "end": period.end,
            "busy_threshold_percent": f"{busy_util_percent().normalize():f}"}


FLEET_EXAMPLE = OpenApiExample("A day", response_only=True, value={
    "start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z",
    "busy_threshold_percent": "5", "days": None,
    "fleet": {"in_service_s": 691200, "failed_s": 1800, "available_s": 689400,
              "covered_s": 650000, "busy_s": 240000, "utilization": "0.3481",
              "reserved": {"reserved_s": 345600, "failed_reserved_s": 0, "covered_s": 340000,
                           "busy_s": 200000, "utilization": "0.5787", "coverage": "0.9838",
                           "mean_util_gpu_percent": "41.20"}},
    "classes": [{"gpu_class": "H100-80GB", "days": None, "figures": {
        "in_service_s": 691200, "failed_s": 1800, "available_s": 689400, "covered_s": 650000,
        "busy_s": 240000, "utilization": "0.3481", "reserved": {
            "reserved_s": 345600, "failed_reserved_s": 0, "covered_s": 340000,
            "busy_s": 200000, "utilization": "0.5787", "coverage": "0.9838",
            "mean_util_gpu_percent": "41.20"}}}],
    "unreserved": [{"team": "Vision", "team_slug": "vision", "busy_s": 40000}],
})
TEAM_EXAMPLE = OpenApiExample("A team's week, per day", response_only=True, value={
    "team": "vision", "start": "2026-11-02T00:00:00Z", "end": "2026-11-09T00:00:00Z",
    "busy_threshold_percent": "5",
    "figures": {"reserved_s": 201600, "failed_reserved_s": 0, "covered_s": 201000,
                "busy_s": 90000, "utilization": "0.4464", "coverage": "0.9970",
                "mean_util_gpu_percent": "38.50", "lent_s": 36000, "lent_busy_s": 30000},
    "reservations": [{
        "id": 42, "gpu_class": "H100-80GB", "count": 4, "start": "2026-11-01T00:00:00Z",
        "end": "2026-11-30T00:00:00Z", "effective_end": "2026-11-30T00:00:00Z",
        "status": "active", "figures": {
            "reserved_s": 201600, "failed_reserved_s": 0, "covered_s": 201000,
            "busy_s": 90000, "utilization": "0.4464", "coverage": "0.9970",
            "mean_util_gpu_percent": "38.50", "lent_s": 36000, "lent_busy_s": 30000}}],
    "days": [{"day": "2026-11-02", "reserved_s": 28800, "busy_s": 12000,
              "utilization": "0.4167"}],
})


class FleetUsageView(APIView):
    """Fleet utilization and reserved figures of an exact period, and per GPU class."""

    @extend_schema(parameters=[s.UsageQuerySerializer], operation_id="usage_fleet",
                   responses={200: OpenApiResponse(s.FleetUsageSerializer, description=(
                       "The period used (end clipped to now), the busy threshold, the "
                       "fleet, each GPU class, and per day with by=day.")), **ERRORS},
                   examples=[FLEET_EXAMPLE])
    def get(self, request):
        period, by_day = _query(request)
        classes = classes_utilization(period=period)
        data = {
            **_head(period), "fleet": s.fleet_figures_data(fleet_utilization(period=period)),
            "classes": [{"gpu_class": klass.name, "figures": s.fleet_figures_data(figures),
                         "days": s.days_data(daily_usage(period=period, gpu_class=klass)
                                             if by_day else None)}
                        for klass, figures in classes],
            "days": s.days_data(daily_usage(period=period) if by_day else None),
            "unreserved": [{"team": row["team"], "team_slug": row["slug"],
                            "busy_s": s.share_seconds(row["seconds"])}
                           for row in unreserved_busy_hours_named(period=period)]
            if is_admin(request.user) else None,
        }
        return Response(s.FleetUsageSerializer(data).data)


class TeamUsageView(APIView):
    """A team's reserved versus busy figures of an exact period, and per reservation."""

    @extend_schema(parameters=[s.UsageQuerySerializer], operation_id="usage_team",
                   responses={200: OpenApiResponse(s.TeamUsageSerializer, description=(
                       "The period used (end clipped to now), the busy threshold, the team, "
                       "each reservation overlapping it, and per day with by=day.")),
                              **ERRORS, 404: TEAM_404},
                   examples=[TEAM_EXAMPLE])
    def get(self, request, team: str):
        team = team_for_view(request.user, team)
        period, by_day = _query(request)
        data = {
            **_head(period), "team": team.slug,
            "figures": s.usage_figures_data(team_utilization(team=team, period=period),
                                            lent=True),
            "reservations": [s.reservation_usage_data(row) for row in
                             team_reservations_utilization(team=team, period=period)],
            "days": s.days_data(daily_usage(period=period, team=team) if by_day else None),
        }
        return Response(s.TeamUsageSerializer(data).data)
