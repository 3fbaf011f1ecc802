"""Statement pages: the admin's review of a month, a statement page, its CSV and PDF, and
the admin actions (approve one or all, adjust). Views parse, ask accounts.permissions,
call one service or selector, render."""

from fractions import Fraction

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.authentication import token_or_login_required
from accounts.permissions import (
    is_admin,
    require_admin,
    require_statements_reader,
    team_for_statements,
)
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.usage.selectors import team_reservations_utilization
from reports.budgets import budgets_of_month
from reports.documents import statement_csv_bytes, statement_filename, statement_pdf_bytes
from reports.energy import statement_energy, statement_energy_kwh
from reports.forms import AdjustmentForm, approval_confirmation_parse, period_parse
from reports.hour_budgets import class_hours_budgets_in_force
from reports.models import Statement
from reports.review import (
    line_kinds_explained,
    previous_period,
    statement_page_late_usage,
    statements_review,
)
from reports.services_statements import (
    adjustment_add,
    approval_opens,
    late_usage_adjust,
    statement_approve,
    statement_current,
    statements_approve_month,
    statements_draft_month,
)


def _period_or_404(month: str) -> Period:
    try:
        return period_parse(month, now=timezone.now())
    except ValueError as exc:
        raise Http404(str(exc)) from exc


def _statement_or_404(request, slug: str, month: str) -> tuple[Statement, Period]:
    team = team_for_statements(request.user, slug)
    period = _period_or_404(month)
    stored = team.statements.filter(month=period.start.date()).exists()
    if period.end <= team.created_at and not stored:
        raise Http404("The team did not exist then.")  # no drafts for arbitrary old months
    return statement_current(team=team, period=period), period


def _posted_period(request) -> Period:
    try:
        return period_parse(request.POST.get("month", ""), now=timezone.now())
    except ValueError as exc:
        raise Http404(str(exc)) from exc


def _review_url(period: Period) -> str:
    return f"{reverse('statement_review')}?month={period.start:%Y-%m}"


@login_required
def statement_review(request):
    require_statements_reader(request.user)
    now = timezone.now()
    default = previous_period(Period.month(now.year, now.month))
    month_text = request.GET.get("month") or f"{default.start:%Y-%m}"
    context = {"month_text": month_text, "max_month": f"{now:%Y-%m}", "review": None,
               "is_admin": is_admin(request.user)}
    try:
        period = period_parse(month_text, now=now)
    except ValueError as exc:
        context["month_error"] = f"Cannot show {month_text!r}: {exc}"
        return render(request, "reports/review.html", context, status=400)
    context["review"] = statements_review(period=period, now=now)
    context["budgets"] = budgets_of_month(month=period.start.date())
    context["class_hour_budgets"] = sorted(
        (b for team_budgets in class_hours_budgets_in_force(
            month=period.start.date()).values() for b in team_budgets),
        key=lambda b: (b.team.name, b.gpu_class.name))
    return render(request, "reports/review.html", context)


@login_required
@require_POST
def statements_draft_all(request):
    require_admin(request.user)
    period = _posted_period(request)
    drafted = statements_draft_month(period=period)
    messages.success(request, f"{len(drafted)} statements of {period.start:%Y-%m} recomputed.")
    return redirect(_review_url(period))


@login_required
@require_POST
def statements_approve_all(request):
    require_admin(request.user)
    period = _posted_period(request)
    try:
        confirmed = approval_confirmation_parse(request.POST.getlist("confirm"))
        approved, refused = statements_approve_month(period=period, by=request.user,
                                                     confirmed=confirmed)
    except ValueError as exc:
        messages.error(request, str(exc))
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"{len(approved)} statements of {period.start:%Y-%m} approved; "
            "their teams' leads are being mailed.",
        )
        for statement, why in refused:
            messages.error(request, f"{statement.team_name} not approved: {why}")
    return redirect(_review_url(period))


@login_required
def statement_detail(request, slug: str, month: str):
    statement, period = _statement_or_404(request, slug, month)
    return _detail_page(request, statement, period, AdjustmentForm())


def _detail_page(request, statement: Statement, period: Period, form, status: int = 200):
    now = timezone.now()
    opens_at = approval_opens(period)
    lines = list(statement.lines.order_by("position"))
    context = {
        "statement": statement,
        "team": statement.team,
        "period": period,
        "month_text": f"{period.start:%Y-%m}",
        "lines": lines,
        "line_kinds": line_kinds_explained(kinds={line.kind for line in lines}),
        "utilization": Fraction(statement.busy_s, statement.reserved_s or 1),
        "coverage": Fraction(statement.covered_s, statement.reserved_s or 1),
        "late": statement_page_late_usage(statement=statement),
        "by_reservation": team_reservations_utilization(
            team=statement.team, period=Period(period.start, statement.computed_until)),
        "to_date": statement.computed_until < period.end,
        "is_admin": is_admin(request.user),
        "opens_at": opens_at,
        "approvable": now >= opens_at and not statement.error,
        "adjustment_form": form,
        "energy_kwh": statement_energy_kwh(lines),
        "energy": statement_energy(statement, lines),
    }
    return render(request, "reports/statement_detail.html", context, status=status)


@login_required
@require_POST
def statement_approve_view(request, slug: str, month: str):
    require_admin(request.user)
    statement, period = _statement_or_404(request, slug, month)
    try:
        statement_approve(statement=statement, by=request.user)
    except DomainError as exc:
        messages.error(request, f"{statement.team_name}: {exc.message}")
    else:
        messages.success(
            request,
            f"{statement.team_name} {period.start:%Y-%m} approved; its leads are being mailed.",
        )
    if request.POST.get("next") == "review":
        return redirect(_review_url(period))
    return redirect("statement_detail", slug=statement.team.slug, month=f"{period.start:%Y-%m}")


@login_required
@require_POST
def statement_adjust(request, slug: str, month: str):
    require_admin(request.user)
    statement, period = _statement_or_404(request, slug, month)
    form = AdjustmentForm(request.POST)
    if form.is_valid():
        try:
            adjustment_add(
                team=statement.team,
                period=period,
                amount=form.cleaned_data["amount"],
                reason=form.cleaned_data["reason"],
                by=request.user,
            )
        except DomainError as exc:
            if exc.field not in form.fields:
                messages.error(request, exc.message)
                return redirect("statement_detail", slug=statement.team.slug, month=month)
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, "Adjustment added.")
            return redirect("statement_detail", slug=statement.team.slug, month=month)
    statement.refresh_from_db()
    return _detail_page(request, statement, period, form, status=400)


@login_required
@require_POST
def statement_late_adjust(request, slug: str, month: str):
    """The one-click adjustment of an approved month's late usage (on the next open month)."""
    require_admin(request.user)
    statement, _period = _statement_or_404(request, slug, month)
    try:
        adjustment = late_usage_adjust(statement=statement, by=request.user)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("statement_detail", slug=slug, month=month)
    messages.success(
        request, f"Adjustment of {adjustment.amount} added to {adjustment.month:%Y-%m}."
    )
    return redirect("statement_detail", slug=slug, month=f"{adjustment.month:%Y-%m}")


def _download(statement: Statement, content: bytes, extension: str, mimetype: str):
    response = HttpResponse(content, content_type=mimetype)
    name = statement_filename(statement, extension)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@token_or_login_required
def statement_csv_download(request, slug: str, month: str):
    statement, _period = _statement_or_404(request, slug, month)
    if statement.error:
        raise Http404("This draft failed; it has no figures to download.")
    return _download(statement, statement_csv_bytes(statement=statement), "csv", "text/csv")


@token_or_login_required
def statement_pdf_download(request, slug: str, month: str):
    statement, _period = _statement_or_404(request, slug, month)
    if statement.error:
        raise Http404("This draft failed; it has no figures to download.")
    pdf = statement_pdf_bytes(statement=statement)
    return _download(statement, pdf, "pdf", "application/pdf")
