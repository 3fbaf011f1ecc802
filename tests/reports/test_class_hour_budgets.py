"""Budgets in GPU-hours per class (docs/budgets.md, "GPU-hour budgets per class"), on the
known month of test_budgets: as of October 11, vision has used 240 H100 GPU-hours (one H100
reserved all month) and its forecast is 744; speech's bob has run 20 busy minutes a day on an
unreserved H100: 3.33 GPU-hours to date, 10.33 forecast (10 days done, 7 a week recent)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from gpuquota.mail.models import MailDelivery
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import reservation_create
from reports.budget_actions import BudgetExceeded
from reports.forecast import forecasts
from reports.hour_budgets import class_hours_budget_set, class_hours_check
from reports.models import ClassHoursBudget
from tests.helpers import assert_api_error
from tests.reports.test_budgets import OCT_11, Month

pytestmark = pytest.mark.django_db
DAY = timedelta(days=1)


@pytest.fixture
def month(db):
    month = Month()
    month.lead()
    month.h100 = Reservation.objects.get().gpu_class
    return month


def _reserve(month, start=OCT_11 + DAY, count=1):
    return reservation_create(team=month.vision, gpu_class=month.h100, count=count,
                              start=start, end=start + DAY, requested_by=month.alice,
                              now=OCT_11)


def test_the_forecast_counts_gpu_hours_per_class(month):
    figures = forecasts(now=OCT_11)
    vision, speech = figures[month.vision.id], figures[month.speech.id]
    assert (vision.hours_to_date(month.h100.pk), vision.hours_total(month.h100.pk)) == (
        Decimal("240.00"), Decimal("744.00"))
    # 10 × 20 minutes to date; + 7 × 20 minutes a week × 21/7 days left = 7 h
    assert (speech.hours_to_date(month.h100.pk), speech.hours_total(month.h100.pk)) == (
        Decimal("3.33"), Decimal("10.33"))


def test_thresholds_fire_once_per_class_and_month(month):
    class_hours_budget_set(team=month.vision, gpu_class="H100-80GB", hours="400",
                           by=month.alice, now=OCT_11)
    fired = class_hours_check(now=OCT_11)  # 240 h is 60 %; the forecast 744 h is 186 %
    assert sorted((a.basis, a.threshold, a.hours) for a in fired) == [
        ("actual", 50, Decimal("240.00")), ("forecast", 100, Decimal("744.00"))]
    assert class_hours_check(now=OCT_11 + timedelta(hours=1)) == []
    keys = set(MailDelivery.objects.filter(recipient=month.alice).values_list("key", flat=True))
    assert keys == {f"budget-hours:{month.vision.id}:{month.h100.pk}:2026-10:actual:50",
                    f"budget-hours:{month.vision.id}:{month.h100.pk}:2026-10:forecast:100"}


def test_refuse_in_gpu_hours(month):
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="760",
                           action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded) as caught:
        _reserve(month)  # 744 + 24 > 760
    assert caught.value.code == "budget_exceeded" and caught.value.message == (
        "Refused by Vision's H100-80GB GPU-hour budget for 2026-10: 744.00 GPU-hours "
        "forecast + 24.00 for this reservation would exceed the 760.00 GPU-hour budget.")
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="768",
                           action="refuse", by=month.alice, now=OCT_11)
    assert _reserve(month).pk  # exactly at the budget: allowed
    assert ClassHoursBudget.objects.count() == 1  # set again for the month: replaced


def test_preemptible_only_in_gpu_hours(month):
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="241",
                           action="preemptible_only", by=month.alice, now=OCT_11)
    assert _reserve(month).pk  # 240 used of 241
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="240",
                           action="preemptible_only", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded) as caught:
        _reserve(month, start=OCT_11 + 3 * DAY)
    assert "used 240.00 of its 240.00 H100-80GB GPU-hours" in caught.value.message


def test_the_api_and_the_team_page(month, time_machine):
    time_machine.move_to(OCT_11, tick=False)
    client = Client()
    client.force_login(month.alice)
    response = client.put("/api/v1/teams/vision/budget/hours",
                          {"gpu_class": "H100-80GB", "hours": "760", "action": "refuse"},
                          content_type="application/json")
    assert response.status_code == 200, response.content
    [row] = response.json()["class_hours"]
    assert (row["gpu_class"], row["hours"], row["to_date_hours"], row["forecast_hours"],
            row["action"], row["thresholds"]) == (
        "H100-80GB", "760.00", "240.00", "744.00", "refuse", [50, 80, 100])
    assert_api_error(client.put("/api/v1/teams/vision/budget/hours",
                                {"gpu_class": "nope", "hours": "1"},
                                content_type="application/json"), 400, "gpu_class")
    assert_api_error(client.put("/api/v1/teams/vision/budget/hours",
                                {"gpu_class": "H100-80GB", "hours": "-1"},
                                content_type="application/json"), 400, "hours")
    start = OCT_11 + DAY
    assert_api_error(client.post("/api/v1/reservations", {
        "team": "vision", "gpu_class": "H100-80GB", "count": 1, "start": start.isoformat(),
        "end": (start + DAY).isoformat()}, content_type="application/json"), 409, "count")
    client.post("/teams/vision/budget/hours/", {"gpu_class": "H100-80GB", "hours": "800",
                                                "thresholds": "90", "action": "notify"})
    page = client.get("/teams/vision/").content.decode()
    assert 'id="class-hour-budgets"' in page and "800.00 GPU-hours" in page
    assert "alerts at 90 %" in page
    bob = Client()
    bob.force_login(month.bob)  # not a member of vision: no such team
    assert bob.put("/api/v1/teams/vision/budget/hours", {"gpu_class": "H100-80GB",
                   "hours": "1"}, content_type="application/json").status_code in (403, 404)


def test_the_preview_lists_the_bookings_of_the_class_that_would_be_refused(month, time_machine):
    from reports.budget_actions import class_hours_refusal_preview
    from reports.hour_budgets import class_hours_statuses

    first, second = (Reservation.objects.create(
        team=month.vision, gpu_class=month.h100, count=1, start=start, end=start + DAY,
        status=status, requested_by=month.alice, requested_at=OCT_11 - DAY)
        for start, status in [(OCT_11 + 5 * DAY, "scheduled"), (OCT_11 + 9 * DAY, "pending")])
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="790",
                           action="refuse", by=month.alice, now=OCT_11)

    def preview():
        forecast = forecasts(now=OCT_11, team_ids=[month.vision.pk])[month.vision.pk]
        statuses = class_hours_statuses(team=month.vision, forecast=forecast,
                                        month=OCT_11.date().replace(day=1))
        return class_hours_refusal_preview(team=month.vision, statuses=statuses,
                                           forecast=forecast, now=OCT_11)
    # 240 h to date + 504 h running to come; + 24 h = 768 fits 790; + 24 h = 792 does not
    assert [(r.reservation, r.hours, r.running_total) for r in preview()] == [
        (second, Decimal("24.00"), Decimal("792.00"))]
    class_hours_budget_set(team=month.vision, gpu_class=month.h100, hours="240",
                           action="preemptible_only", by=month.alice, now=OCT_11)
    assert [r.reservation for r in preview()] == [first, second]
    time_machine.move_to(OCT_11, tick=False)
    client = Client()
    client.force_login(month.alice)
    body = client.get("/api/v1/teams/vision/budget").json()
    assert [r["reservation"] for r in body["class_hours_refusal_preview"]] == [
        first.pk, second.pk]
    assert 'id="class-hours-refusal-preview"' in client.get("/teams/vision/").content.decode()
    first.refresh_from_db()
    assert first.status == "scheduled"  # a preview refuses nothing


def test_the_hourly_task_checks_both_kinds_of_budget(month, time_machine):
    from reports.budgets import budget_set
    from reports.tasks import budgets_check_task

    time_machine.move_to(OCT_11, tick=False)
    budget_set(team=month.vision, amount="1000", by=month.alice, now=OCT_11)
    class_hours_budget_set(team=month.vision, gpu_class="H100-80GB", hours="400",
                           by=month.alice, now=OCT_11)
    outcome = budgets_check_task()
    assert (len(outcome["fired"]), len(outcome["fired_class_hours"])) == (2, 2)
    assert budgets_check_task() == {"fired": [], "fired_class_hours": []}
