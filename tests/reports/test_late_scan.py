"""Late usage of months before last (accounting.md, Closing a period): a back-fill into an
approved September, found in December by the daily scan, listed on the review page for
every team, settled in one click, and quiet after that."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from gpuquota.core.timeutil import Period
from reports.late_scan import late_usage_checks_pending, late_usage_scan
from reports.models import Adjustment, LateUsageCheck, Statement
from reports.review import statements_review
from reports.services_statements import (
    adjustment_add,
    late_usage_adjust,
    statements_approve_month,
    statements_draft_month,
)
from reports.tasks import late_usage_scan_task
from tests.reports.factories import NOVEMBER, OCT_3, OCTOBER, SETTLED, H, h100, reserved_hours

pytestmark = pytest.mark.django_db
SEPTEMBER = Period.month(2026, 9)
SEP_3 = datetime(2026, 9, 3, tzinfo=UTC)
DEC_5 = datetime(2026, 12, 5, tzinfo=UTC)


@pytest.fixture
def closed(roles, time_machine):
    """Vision billed in September and October, Speech in September only; both months
    approved; now early December, November drafted."""
    roles.gpu_class = h100()
    reserved_hours(roles.team, roles.gpu_class, SEP_3, 10)
    reserved_hours(roles.other_team, roles.gpu_class, SEP_3, 4)
    reserved_hours(roles.team, roles.gpu_class, OCT_3, 10)
    time_machine.move_to(datetime(2026, 10, 4, tzinfo=UTC), tick=False)
    statements_draft_month(period=SEPTEMBER)
    statements_approve_month(period=SEPTEMBER, by=roles.admin)
    time_machine.move_to(SETTLED, tick=False)
    statements_draft_month(period=OCTOBER)
    statements_approve_month(period=OCTOBER, by=roles.admin)
    time_machine.move_to(DEC_5, tick=False)
    statements_draft_month(period=NOVEMBER)
    return roles


def september(team) -> Statement:
    return Statement.objects.get(team=team, month=SEPTEMBER.start.date())


def test_a_backfill_into_an_older_approved_month_is_found_and_listed(closed):
    assert late_usage_scan()["2026-09"] == 0
    assert not statements_review(period=NOVEMBER, now=DEC_5).earlier_late

    reserved_hours(closed.team, closed.gpu_class, SEP_3 + 20 * H, 3)  # 7.50 more, recorded now
    reserved_hours(closed.other_team, closed.gpu_class, SEP_3 + 20 * H, 2)  # 5.00 more
    assert september(closed.team).total == Decimal("25.00")  # approved: never changes
    assert not statements_review(period=NOVEMBER, now=DEC_5).earlier_late  # not scanned yet

    found = late_usage_scan_task.delay().get()
    assert (found["2026-11"], found["2026-10"], found["2026-09"]) == (0, 0, 2)
    assert len(found) == 12
    assert late_usage_scan() == found  # twice: the same
    assert LateUsageCheck.objects.count() == 3  # September's two, October's one

    review = statements_review(period=NOVEMBER, now=DEC_5)
    assert [(c.statement.team_slug, c.difference) for c in review.earlier_late] == [
        ("speech", Decimal("5.00")), ("vision", Decimal("7.50"))]
    rows = {row.slug: row for row in review.rows}
    assert set(rows) == {"vision"}  # Speech has no statement of October or November
    assert "late usage of an earlier month" in rows["vision"].flags
    assert rows["vision"].late_usage.difference == 0  # October, priced by the page: on time


def test_settling_it_quiets_it_until_more_arrives(closed):
    reserved_hours(closed.team, closed.gpu_class, SEP_3 + 20 * H, 3)
    late_usage_scan()
    adjustment = late_usage_adjust(statement=september(closed.team), by=closed.admin)
    assert (adjustment.month, adjustment.amount) == (NOVEMBER.start.date(), Decimal("7.50"))
    assert not late_usage_checks_pending(before=OCTOBER.start.date()).exists()
    late_usage_scan()
    assert not late_usage_checks_pending(before=OCTOBER.start.date()).exists()

    reserved_hours(closed.team, closed.gpu_class, SEP_3 + 23 * H, 1)  # 2.50 more
    late_usage_scan()
    adjustment_add(team=closed.team, period=NOVEMBER, amount="1.00", reason="part of it",
                   by=closed.admin, corrects=september(closed.team))
    [check] = late_usage_checks_pending(before=OCTOBER.start.date())
    assert check.difference == Decimal("1.50")
    assert Adjustment.objects.count() == 2


def test_an_old_months_adjustment_goes_to_a_month_still_reviewed(closed):
    reserved_hours(closed.other_team, closed.gpu_class, SEP_3 + 20 * H, 2)
    adjustment = late_usage_adjust(statement=september(closed.other_team), by=closed.admin)
    # Speech has no October statement, but October is no longer reviewed: November is.
    assert (adjustment.month, adjustment.amount) == (NOVEMBER.start.date(), Decimal("5.00"))
    review = statements_review(period=NOVEMBER, now=DEC_5)
    assert {row.slug for row in review.rows} == {"vision", "speech"}


def test_the_review_page_lists_them_with_links(client, closed):
    reserved_hours(closed.other_team, closed.gpu_class, SEP_3 + 20 * H, 2)
    late_usage_scan()
    client.force_login(closed.admin)
    body = client.get(reverse("statement_review") + "?month=2026-11").content.decode()
    assert 'id="earlier-late-speech-2026-09"' in body
    assert reverse("statement_detail", args=["speech", "2026-09"]) + "#late-usage" in body
    assert "5.00" in body
    detail = client.get(reverse("statement_detail", args=["speech", "2026-09"]))
    assert detail.status_code == 200 and 'id="late-difference"' in detail.content.decode()
