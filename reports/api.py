"""The statement export API (accounting.md, Statement export): one team's month, or the
whole organisation's, as JSON or CSV. Drafts are shown as drafts, recomputed on request
when stale. Leads and members see their teams, admins all, anyone else a 404."""

import re
from datetime import datetime

from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import team_for_statements
from accounts.selectors import teams_billed_visible
from gpuquota.core.api import ErrorSerializer
from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.timeutil import Period
from reports import export, focus
from reports.documents import statement_filename, statement_pdf_bytes
from reports.models import Statement, StatementLine
from reports.selectors import statements_visible
from reports.services_statements import statement_current, statements_current

MONTH = re.compile(r"(\d{4})-(\d{2})")


def period_parse(text: str, now: datetime) -> Period:
    """`YYYY-MM` of a month that has started; a DomainError naming `period` otherwise."""
    match = MONTH.fullmatch(text)
    if match is None:
        raise DomainError(f"Expected a month as YYYY-MM, not {text!r}.", field="period")
    year, month = int(match[1]), int(match[2])
    if not 1 <= month <= 12 or year < 1970:
        raise DomainError(f"{text} is not a month.", field="period")
    period = Period.month(year, month)
    if period.start > now:
        raise DomainError(f"{text} has not started yet.", field="period")
    return period


class LineSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(StatementLine.Kind.choices)
    gpu_class = serializers.CharField(allow_null=True)
    seconds = serializers.IntegerField(allow_null=True)
    hours = serializers.CharField(allow_null=True, help_text="Decimal string, 2 places.")
    rate = serializers.CharField(allow_null=True, help_text="Decimal string, as stored.")
    amount = serializers.CharField(help_text="Decimal string, 2 places.")
    reason = serializers.CharField(required=False, help_text="Adjustments only.")


class UtilizationSerializer(serializers.Serializer):
    reserved_hours = serializers.CharField()
    busy_hours = serializers.CharField()
    utilization = serializers.CharField(help_text="busy / reserved seconds, 4 places.")
    coverage = serializers.CharField(help_text="covered / reserved seconds, 4 places.")
    lent_hours = serializers.CharField(
        help_text="Hours its GPUs were lent and not failed, 2 places (0.00: nothing lent).")
    lent_busy_hours = serializers.CharField(
        help_text="Borrowed busy hours on its lent GPUs, attributed or not, 2 places.")


class StatementSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="The team's slug.")
    period = serializers.CharField(help_text="YYYY-MM (UTC).")
    currency = serializers.CharField(allow_null=True, help_text="Null on a failed draft.")
    status = serializers.ChoiceField(Statement.Status.choices)
    lines = LineSerializer(many=True)
    total = serializers.CharField(help_text="Decimal string: the sum of the line amounts.")
    utilization = UtilizationSerializer()
    cost_center = serializers.CharField(help_text="The team's cost center when the statement "
                                        "was last drafted (empty: none).")
    approved_at = serializers.DateTimeField(allow_null=True,
                                            help_text="UTC, whole seconds; null until approved.")
    error = serializers.CharField(required=False,
                                  help_text="A failed draft only: why it cannot be approved.")


class OrganisationSerializer(serializers.Serializer):
    period = serializers.CharField()
    statements = StatementSerializer(many=True)


ERRORS = {400: OpenApiResponse(ErrorSerializer, description="A bad or future period."),
          404: OpenApiResponse(ErrorSerializer, description="No such team (or not visible).")}
CSV = OpenApiResponse(OpenApiTypes.STR, description="text/csv: " + ",".join(export.CSV_COLUMNS))
PDF = OpenApiResponse(OpenApiTypes.BINARY, description="application/pdf: the statement.")
ORGANISATION_CSV = OpenApiResponse(
    OpenApiTypes.STR, description="text/csv: " + ",".join(export.CSV_COLUMNS))


def _csv_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class _TeamStatement(APIView):
    def statement(self, request, team: str, period: str):
        now = whole_second(timezone.now())
        team = team_for_statements(request.user, team)
        return statement_current(team=team, period=period_parse(period, now), now=now)


class TeamStatementView(_TeamStatement):
    """One team's statement of a month, in the stable export format."""

    @extend_schema(responses={200: StatementSerializer, **ERRORS}, operation_id="statement")
    def get(self, request, team: str, period: str):
        return Response(export.statement_export(self.statement(request, team, period)))


class TeamStatementCsvView(_TeamStatement):
    """The same as CSV: one row per line."""

    @extend_schema(responses={(200, "text/csv"): CSV, **ERRORS}, operation_id="statement_csv")
    def get(self, request, team: str, period: str):
        statement = self.statement(request, team, period)
        return _csv_response(export.statement_csv(statement),
                             export.statement_csv_filename(statement))


class _FirstRenderer(BaseContentNegotiation):
    """The PDF is returned as it is; errors are JSON whatever the client accepts (an
    `Accept: application/pdf` must not turn a 404 into a 406)."""

    def select_parser(self, request, parsers):
        return parsers[0]

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class TeamStatementPdfView(_TeamStatement):
    """The same as the PDF the statement page offers (and the leads are mailed): the
    lines, total, utilization and daily chart; a draft says DRAFT on every page."""

    content_negotiation_class = _FirstRenderer

    @extend_schema(responses={(200, "application/pdf"): PDF, **ERRORS,
                              409: OpenApiResponse(ErrorSerializer,
                                                   description="A failed draft: no figures.")},
                   operation_id="statement_pdf")
    def get(self, request, team: str, period: str):
        statement = self.statement(request, team, period)
        if statement.error:
            raise Conflict(f"This draft failed ({statement.error}); it has no figures to "
                           "print until that is fixed.", field="period")
        response = HttpResponse(statement_pdf_bytes(statement=statement),
                                content_type="application/pdf")
        name = statement_filename(statement, "pdf")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class _Organisation(APIView):
    def statements(self, request, period: str) -> tuple[Period, list]:
        now = whole_second(timezone.now())
        if not teams_billed_visible(user=request.user).exists():
            raise Http404("Not found.")
        month = period_parse(period, now)
        statements_current(period=month, now=now)
        return month, list(statements_visible(user=request.user, month=month.start.date())
                           .order_by("team_name"))


class OrganisationStatementsView(_Organisation):
    """Every team's statement of a month (the caller's teams; admins: all)."""

    @extend_schema(responses={200: OrganisationSerializer, **ERRORS},
                   operation_id="statements_month")
    def get(self, request, period: str):
        month, statements = self.statements(request, period)
        return Response(export.organisation_export(period_label=f"{month.start:%Y-%m}",
                                                   statements=statements))


class OrganisationStatementsCsvView(_Organisation):
    """One CSV file per month for finance: every team's lines, in the team CSV's columns."""

    @extend_schema(responses={(200, "text/csv"): ORGANISATION_CSV, **ERRORS},
                   operation_id="statements_month_csv")
    def get(self, request, period: str):
        month, statements = self.statements(request, period)
        return _csv_response(export.organisation_csv(statements),
                             f"statements-{month.start:%Y-%m}.csv")


class FocusMonthCsvView(_Organisation):
    """A month as a FinOps FOCUS 1.3 Cost and Usage dataset (CSV): one row per statement
    line of the caller's teams (admins: all), BilledCost adding up to the statements."""

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(
        OpenApiTypes.STR, description="text/csv: " + ",".join(focus.COLUMNS)), **ERRORS},
        operation_id="focus_month_csv")
    def get(self, request, period: str):
        month, statements = self.statements(request, period)
        return _csv_response(focus.focus_csv(focus.focus_rows(statements=statements,
                                                              period=month)),
                             f"focus-{month.start:%Y-%m}.csv")


class FocusMonthView(_Organisation):
    """The same rows as JSON (`{"focus_version", "period", "columns", "rows"}`)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS}, operation_id="focus_month")
    def get(self, request, period: str):
        month, statements = self.statements(request, period)
        return Response({"focus_version": focus.FOCUS_VERSION,
                         "period": f"{month.start:%Y-%m}", "columns": focus.COLUMNS,
                         "rows": focus.focus_rows(statements=statements, period=month)})
