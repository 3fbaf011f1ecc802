"""A budget's action at 100 % (docs/budgets.md, "Actions at 100 %"), on the known month of
test_budgets: as of October 11, vision has spent 600.00 and its forecast is 1860.00 (one H100
reserved all month at 2.50 per GPU-hour); one more H100-day costs 60.00."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.reservations.services import reservation_create
from reports.budget_actions import BudgetExceeded, refusal_preview
from reports.budgets import budget_set, budgets_check
from tests.helpers import assert_api_error
from tests.reports.test_budgets import OCT_11, Month

pytestmark = pytest.mark.django_db
DAY = timedelta(days=1)


@pytest.fixture
def month(db):
    month = Month(busy=False)
    month.lead()
    month.h100 = Reservation.objects.get().gpu_class
    return month


def _reserve(month, start=OCT_11 + DAY, count=1):
    return reservation_create(team=month.vision, gpu_class=month.h100, count=count,
                              start=start, end=start + DAY, requested_by=month.alice,
                              now=OCT_11)


def test_notify_refuses_nothing(month):
    budget_set(team=month.vision, amount="100", by=month.alice, now=OCT_11)
    assert _reserve(month).pk


def test_refuse_refuses_a_reservation_that_would_take_the_forecast_over(month):
    budget_set(team=month.vision, amount="1900", action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded) as caught:
        _reserve(month)  # 1860.00 + 60.00 > 1900.00
    assert caught.value.field == "count" and caught.value.code == "budget_exceeded"
    assert "1860.00 USD forecast + 60.00 for this reservation would exceed the 1900.00" \
        in caught.value.message
    assert Reservation.objects.count() == 1
    budget_set(team=month.vision, amount="1920", action="refuse", by=month.alice, now=OCT_11)
    assert _reserve(month).pk  # exactly at the budget: allowed
    # a month without a budget is not checked: November is free
    assert _reserve(month, start=datetime(2026, 11, 2, tzinfo=UTC)).pk


def test_an_extension_is_new_reserved_time(month):
    from gpuquota.reservations.services_change import reservation_extend
    from tests.factories import QuotaFactory
    QuotaFactory(team=month.vision, gpu_class=month.h100, gpus=2)
    booked = _reserve(month)  # scheduled, 60.00: the forecast is now 1920.00
    assert booked.status == "scheduled"
    budget_set(team=month.vision, amount="1950", action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded):  # one more day: 1980.00
        reservation_extend(reservation=booked, actor=month.alice, end=booked.end + DAY,
                           now=OCT_11)
    extended = reservation_extend(reservation=booked, actor=month.alice,
                                  end=booked.end + DAY / 2, now=OCT_11)  # 1950.00: allowed
    assert extended.end == booked.end + DAY / 2


def test_preemptible_only_refuses_every_new_reservation_once_spent(month):
    budget_set(team=month.vision, amount="700", action="preemptible_only", by=month.alice,
               now=OCT_11)
    assert _reserve(month).pk  # 600.00 spent of 700.00: not yet (the forecast is not used)
    budget_set(team=month.vision, amount="600", action="preemptible_only", by=month.alice,
               now=OCT_11)
    with pytest.raises(BudgetExceeded) as caught:
        _reserve(month, start=OCT_11 + 2 * DAY)
    assert "preemptible (borrowed) GPUs only" in caught.value.message


def test_running_work_is_never_touched(month):
    running = Reservation.objects.get()
    assignment = Assignment.objects.get()
    budget_set(team=month.vision, amount="100", action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded):
        _reserve(month)
    budgets_check(now=OCT_11)
    budget_set(team=month.vision, amount="100", action="preemptible_only", by=month.alice,
               now=OCT_11)
    budgets_check(now=OCT_11 + timedelta(hours=1))
    running.refresh_from_db()
    assert (running.status, running.end) == ("active", datetime(2026, 11, 1, tzinfo=UTC))
    assert Assignment.objects.get().assigned_until == assignment.assigned_until


def test_the_preview_lists_the_bookings_to_come_that_would_be_refused(month):
    first, second = (Reservation.objects.create(
        team=month.vision, gpu_class=month.h100, count=1, start=start, end=start + DAY,
        status=status, requested_by=month.alice, requested_at=OCT_11 - DAY)
        for start, status in [(OCT_11 + 5 * DAY, "scheduled"), (OCT_11 + 9 * DAY, "pending")])
    budget = budget_set(team=month.vision, amount="1950", action="refuse", by=month.alice,
                        now=OCT_11)
    # 600.00 to date + 1260.00 running to come; + 60.00 = 1920.00 fits; + 60.00 does not
    preview = refusal_preview(team=month.vision, budget=budget, now=OCT_11)
    assert [(r.reservation, r.cost, r.running_total) for r in preview] == [
        (second, Decimal("60.00"), Decimal("1980.00"))]
    budget = budget_set(team=month.vision, amount="500", action="preemptible_only",
                        by=month.alice, now=OCT_11)
    assert [r.reservation for r in refusal_preview(team=month.vision, budget=budget,
                                                   now=OCT_11)] == [first, second]
    first.refresh_from_db()
    assert first.status == "scheduled"  # a preview refuses nothing


def test_the_api_and_the_form_give_the_reason(month, time_machine):
    time_machine.move_to(OCT_11, tick=False)
    client = Client()
    client.force_login(month.alice)
    start = OCT_11 + DAY
    response = client.put("/api/v1/teams/vision/budget", {"amount": "1900", "action": "refuse"},
                          content_type="application/json")
    assert response.json()["budget"]["action"] == "refuse"
    assert_api_error(client.put("/api/v1/teams/vision/budget", {"amount": "1", "action": "x"},
                                content_type="application/json"), 400, "action")
    Reservation.objects.create(team=month.vision, gpu_class=month.h100, count=1,
                               start=OCT_11 + 3 * DAY, end=OCT_11 + 4 * DAY, status="pending",
                               requested_by=month.alice, requested_at=OCT_11)
    body = client.get("/api/v1/teams/vision/budget").json()
    assert [(r["count"], r["cost"]) for r in body["refusal_preview"]] == [(1, "60.00")]
    response = client.post("/api/v1/reservations", {
        "team": "vision", "gpu_class": "H100-80GB", "count": 1, "start": start.isoformat(),
        "end": (start + DAY).isoformat()}, content_type="application/json")
    assert_api_error(response, 409, "count")
    page = client.post("/reservations/new/", {
        "team": month.vision.pk, "gpu_class": month.h100.pk, "count": 1, "placement": "any",
        "purpose": "", "start": start.strftime("%Y-%m-%dT%H:%M"),
        "end": (start + DAY).strftime("%Y-%m-%dT%H:%M")}).content.decode()
    assert "would exceed the 1900.00 USD budget" in page
    team_page = client.get("/teams/vision/").content.decode()
    assert 'id="refusal-preview"' in team_page and "Refuse reservations that" in team_page


def _pending(month, start=OCT_11 + 5 * DAY):
    return Reservation.objects.create(
        team=month.vision, gpu_class=month.h100, count=1, start=start, end=start + DAY,
        status="pending", over_quota=True, requested_by=month.alice,
        requested_at=OCT_11 - DAY)


def test_approving_a_pending_request_is_checked_like_a_new_one(month, time_machine):
    from gpuquota.reservations.services import reservation_approve
    from tests.factories import AdminFactory
    time_machine.move_to(OCT_11, tick=False)
    admin = AdminFactory()
    pending = _pending(month)
    budget_set(team=month.vision, amount="1900", action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded) as caught:  # 1860.00 forecast + 60.00 > 1900.00
        reservation_approve(reservation=pending, actor=admin, now=OCT_11)
    assert caught.value.message == (
        "Refused by Vision's budget for 2026-10: 1860.00 USD forecast + 60.00 for this "
        "reservation would exceed the 1900.00 USD budget.")
    pending.refresh_from_db()
    assert pending.status == "pending" and not pending.assignments.exists()
    client = Client()
    client.force_login(admin)
    assert_api_error(client.post(f"/api/v1/reservations/{pending.pk}/approve", {},
                                 content_type="application/json"), 409, "count")
    assert client.post(f"/api/v1/reservations/{pending.pk}/approve", {},
                       content_type="application/json").json()["code"] == "budget_exceeded"
    page = client.post(f"/reservations/{pending.pk}/decide/", {"decision": "approve"},
                       follow=True).content.decode()
    assert "would exceed the 1900.00 USD budget" in page
    budget_set(team=month.vision, amount="1920", action="refuse", by=month.alice, now=OCT_11)
    assert reservation_approve(reservation=pending, actor=admin,
                               now=OCT_11).status == "scheduled"  # exactly at the budget


def test_a_gpu_swap_is_not_refused_it_adds_no_reserved_time(month):
    from gpuquota.reservations.services_change import reservation_swap_gpu
    running = Reservation.objects.get()
    held = Assignment.objects.get().gpu
    budget_set(team=month.vision, amount="100", action="refuse", by=month.alice, now=OCT_11)
    with pytest.raises(BudgetExceeded):
        _reserve(month)
    new = reservation_swap_gpu(reservation=running, actor=month.alice, gpu=held, now=OCT_11)
    assert new.gpu_id != held.id and new.assigned_from == OCT_11
