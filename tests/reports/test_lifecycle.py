"""Closing a period: drafts, the settlement delay, failed drafts (rate-card gaps, mixed
currencies), adjustments, sent, late usage after approval (accounting.md)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from reports.models import Adjustment, Statement
from reports.selectors import late_usage_month, statement_late_usage
from reports.services_statements import (
    adjustment_add,
    late_usage_adjust,
    statement_approve,
    statement_draft,
    statement_mark_sent,
    statements_approve_month,
    statements_draft_month,
)
from tests.factories import GpuClassFactory, RateCardFactory
from tests.reports.factories import NOVEMBER, OCT_3, OCTOBER, SETTLED, H, h100, reserved_hours

pytestmark = pytest.mark.django_db


@pytest.fixture
def billed(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    roles.gpu_class = h100()
    reserved_hours(roles.team, roles.gpu_class, OCT_3, 10)
    return roles


def test_the_current_month_is_drafted_to_date(roles, time_machine):
    time_machine.move_to(OCT_3 + 5 * H, tick=False)
    reserved_hours(roles.team, h100(), OCT_3, 10)
    statement = statement_draft(team=roles.team, period=OCTOBER)
    assert statement.computed_until == OCT_3 + 5 * H
    assert [(line.seconds, line.amount) for line in statement.lines.all()] == [
        (18000, Decimal("12.50"))]
    with pytest.raises(DomainError) as refused:
        statement_draft(team=roles.team, period=NOVEMBER)
    assert refused.value.field == "period" and "not started" in refused.value.message


def test_approval_waits_for_the_settlement_delay(billed, time_machine):
    statement = statement_draft(team=billed.team, period=OCTOBER)
    with pytest.raises(Conflict) as early:
        statement_approve(statement=statement, by=billed.admin, now=SETTLED - timedelta(seconds=1))
    assert "can be approved from 2026-11-04 00:00Z" in early.value.message
    with pytest.raises(PermissionDenied):
        statement_approve(statement=statement, by=billed.lead)
    statement_approve(statement=statement, by=billed.admin)
    assert (statement.status, statement.approved_by, statement.approved_at) == (
        "approved", billed.admin, SETTLED)
    assert statement.total == Decimal("25.00")
    assert AuditEntry.objects.filter(action="statement.approve", object_id=str(statement.pk),
                                     actor=billed.admin).exists()
    with pytest.raises(Conflict):
        statement_approve(statement=statement, by=billed.admin)


def test_the_settlement_delay_comes_from_settings(billed, settings):
    settings.SETTLEMENT_DELAY_HOURS = 100
    statement = statement_draft(team=billed.team, period=OCTOBER)
    with pytest.raises(Conflict) as early:
        statement_approve(statement=statement, by=None)
    assert "2026-11-05 04:00Z" in early.value.message and "100 h" in early.value.message


def test_a_rate_card_gap_fails_the_draft_naming_class_and_interval(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    klass = h100(valid_from=datetime(2026, 10, 3, 4, tzinfo=UTC))
    reserved_hours(roles.team, klass, OCT_3, 10)
    statement = statement_draft(team=roles.team, period=OCTOBER)
    assert statement.error == ("No rate card for H100-80GB from 2026-10-01 00:00Z to "
                               "2026-10-03 04:00Z: 14400 s of reserved time cannot be priced.")
    assert (statement.total, statement.currency, statement.lines.count()) == (0, "", 0)
    with pytest.raises(Conflict) as refused:
        statement_approve(statement=statement, by=roles.admin)
    assert "cannot be approved" in refused.value.message and "2026-10-03 04:00Z" in \
        refused.value.message
    approved, failed = statements_approve_month(period=OCTOBER, by=roles.admin)
    assert approved == [] and [s.pk for s, _why in failed] == [statement.pk]


def test_mixed_currencies_fail_the_draft_naming_them(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    l4 = GpuClassFactory(name="L4")
    RateCardFactory(gpu_class=l4, reserved_rate=Decimal("0.80"), currency="EUR")
    reserved_hours(roles.team, h100(), OCT_3, 10)
    reserved_hours(roles.team, l4, OCT_3, 10)
    statement = statement_draft(team=roles.team, period=OCTOBER)
    assert statement.error == ("Lines would mix currencies: EUR (L4), USD (H100-80GB); a "
                               "statement has one currency.")


def test_adjustments_only_on_open_months_and_checked(billed):
    with pytest.raises(PermissionDenied):
        adjustment_add(team=billed.team, period=OCTOBER, amount="5", reason="x", by=billed.lead)
    for amount, reason, field in [("1.234", "x", "amount"), ("0", "x", "amount"),
                                  ("abc", "x", "amount"), ("5.00", "  ", "reason")]:
        with pytest.raises(DomainError) as bad:
            adjustment_add(team=billed.team, period=OCTOBER, amount=amount, reason=reason,
                           by=billed.admin)
        assert bad.value.field == field
    adjustment_add(team=billed.team, period=OCTOBER, amount="-5.50", reason="credit",
                   by=billed.admin)
    statement = Statement.objects.get(team=billed.team, month=OCTOBER.start.date())
    assert statement.total == Decimal("19.50")
    statement_approve(statement=statement, by=billed.admin)
    with pytest.raises(Conflict) as closed:
        adjustment_add(team=billed.team, period=OCTOBER, amount="1.00", reason="late",
                       by=billed.admin)
    assert closed.value.field == "period"


def test_sent_only_after_approval(billed):
    statement = statement_draft(team=billed.team, period=OCTOBER)
    with pytest.raises(Conflict):
        statement_mark_sent(statement=statement)
    statement_approve(statement=statement, by=None)
    sent = statement_mark_sent(statement=statement)
    assert (sent.status, sent.sent_at) == ("sent", SETTLED)
    assert statement_mark_sent(statement=statement).sent_at == SETTLED  # idempotent


def test_late_usage_changes_nothing_approved_and_is_settled_in_one_click(billed, time_machine):
    [october] = statements_draft_month(period=OCTOBER)
    statement_approve(statement=october, by=billed.admin)
    assert statement_late_usage(statement=october).difference == 0

    time_machine.move_to(SETTLED + 24 * H, tick=False)
    reserved_hours(billed.team, billed.gpu_class, OCT_3 + 20 * H, 3)  # recorded late: 7.50 more
    statements_draft_month(period=OCTOBER)
    assert statement_draft(team=billed.team, period=OCTOBER).total == Decimal("25.00")
    october.refresh_from_db()
    assert [(line.seconds, line.amount) for line in october.lines.all()] == [
        (36000, Decimal("25.00"))]

    late = statement_late_usage(statement=october)
    assert [(line.kind, line.approved_seconds, line.now_seconds, line.difference)
            for line in late.changed_lines] == [("reserved", 36000, 46800, Decimal("7.50"))]
    assert late.difference == Decimal("7.50")
    assert late_usage_month(month=OCTOBER.start.date())[billed.team.id].difference == \
        Decimal("7.50")

    adjustment = late_usage_adjust(statement=october, by=billed.admin)
    assert (adjustment.month, adjustment.amount, adjustment.corrects) == (
        NOVEMBER.start.date(), Decimal("7.50"), october)
    assert adjustment.reason == ("Late usage for 2026-10: reserved H100-80GB @ 2.5000: "
                                 "+10800 s, +7.50")
    november = Statement.objects.get(team=billed.team, month=NOVEMBER.start.date())
    assert [(line.kind, line.amount) for line in november.lines.all()] == [
        ("adjustment", Decimal("7.50"))]
    assert statement_late_usage(statement=october).difference == 0
    assert late_usage_month(month=OCTOBER.start.date())[billed.team.id].difference == 0
    with pytest.raises(Conflict):
        late_usage_adjust(statement=october, by=billed.admin)
    assert Adjustment.objects.count() == 1
