"""Budgets, the month-end forecast and its backtest, on a known month (docs/budgets.md).

October 2026, card: reserved 2.50, on demand 3.00 per GPU-hour.
- vision reserves one H100 for the whole month: 744 h × 2.50 = 1860.00.
- speech's bob runs 20 busy minutes a day, every day, on an unreserved GPU: 1.00 a day,
  31.00 in the month.
As of October 11 00:00: vision 600.00 to date + 1260.00 booked = 1860.00; speech 10.00 to
date + the last 7 days' 7.00 × 21/7 = 21.00 → 31.00. Both exact, so the backtest's error is
0 from day 8 on (the 7-day window then lies inside the month). A one-day burst is not
extrapolated (the busiest day counts as the second busiest)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import transaction

from accounts.models import Membership
from gpuquota.core.errors import DomainError
from gpuquota.core.timeutil import Period
from gpuquota.ingest.models import ProcessRecord
from gpuquota.mail.models import MailDelivery
from gpuquota.mail.outbox import mail_send_queued
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.reservations.models import Assignment, Reservation
from gpuquota.usage.sweep import dirty_hours_process
from reports.budgets import budget_set, budgets_check, team_budget_status
from reports.forecast import forecasts
from reports.models import BudgetAlert
from tests.factories import EPOCH, GpuClassFactory, RateCardFactory, make_gpu
from tests.usage.factories import add_samples, team_with_user

pytestmark = pytest.mark.django_db
M, H, D = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
OCTOBER = Period.month(2026, 10)
OCT_11 = datetime(2026, 10, 11, tzinfo=UTC)


def busy_minutes(gpu, start, minutes, user, pid):
    """Ten-minute windows from `start`, each with the user's process, in one batch."""
    windows, received = range(0, minutes, 10), start + minutes * M
    add_samples(gpu, [{"start": start + i * M, "seconds": 600, "util": 80,
                       "energy_j": 180000.0, "received_at": received} for i in windows])
    with transaction.atomic():
        ProcessRecord.objects.bulk_create([
            ProcessRecord(gpu=gpu, window_start=start + i * M, window_end=start + (i + 10) * M,
                          pid=pid, pid_start=1, user=user, command="python", job_source="unix",
                          received_at=received) for i in windows])
        gpu_hours_mark_dirty(marks=[(gpu.id, start + i * M) for i in windows])


class Month:
    def __init__(self, busy: bool = True, burst: bool = False):
        h100 = GpuClassFactory(name="H100-80GB")
        RateCardFactory(gpu_class=h100, valid_from=EPOCH, reserved_rate=Decimal("2.50"),
                        on_demand_rate=Decimal("3.00"))
        reserved = make_gpu(gpu_class=h100)
        spare = make_gpu(gpu_class=h100, node=reserved.node, index=1)
        cluster = reserved.node.cluster
        self.vision, self.alice = team_with_user("vision", "alice", cluster)
        self.speech, self.bob = team_with_user("speech", "bob", cluster)
        # no rollups of the reserved GPU are needed (reserved time is priced from its
        # assignment), so its 744 hours are not marked for the sweep
        reservation = Reservation.objects.create(
            team=self.vision, gpu_class=h100, count=1, start=OCTOBER.start, end=OCTOBER.end,
            status="active", requested_by=self.alice, requested_at=OCTOBER.start)
        Assignment.objects.create(reservation=reservation, gpu=reserved,
                                  assigned_from=OCTOBER.start, assigned_until=OCTOBER.end)
        for day in range(31 if busy else 0):
            busy_minutes(spare, OCTOBER.start + day * D + H, 20, "bob", 100 + day)
        if burst:  # 200 minutes more on the 9th: 10.00 once
            busy_minutes(spare, datetime(2026, 10, 9, 3, tzinfo=UTC), 200, "bob", 999)
        while dirty_hours_process():
            pass


    def lead(self):
        Membership.objects.filter(user=self.alice, team=self.vision).update(role="lead")
        return self.alice


@pytest.fixture
def month(db):
    return Month()


@pytest.fixture
def reserved_only(db):
    """The month without speech's on-demand use."""
    return Month(busy=False)


def test_the_forecast_is_to_date_plus_booked_plus_recent_use(month):
    figures = forecasts(now=OCT_11)
    vision, speech = figures[month.vision.id], figures[month.speech.id]
    assert (vision.to_date, vision.booked, vision.recent) == (
        Decimal("600.00"), Decimal("1260.00"), Decimal("0.00"))
    assert vision.booked_s == 21 * 86400
    assert vision.total == Decimal("1860.00")
    assert (speech.to_date, speech.booked, speech.recent_amount, speech.recent) == (
        Decimal("10.00"), Decimal("0.00"), Decimal("7.00"), Decimal("21.00"))
    assert speech.total == Decimal("31.00")
    assert "1260.00 for 504.00 booked GPU-hours" in vision.basis


def test_a_one_day_burst_is_not_repeated_over_the_rest_of_the_month(db):
    month = Month(burst=True)
    speech = forecasts(now=OCT_11)[month.speech.id]
    # the 9th's 11.00 counts as the second busiest day's 1.00: 7.00 a week, as without it
    assert (speech.to_date, speech.recent_amount, speech.recent_counted, speech.recent) == (
        Decimal("20.00"), Decimal("17.00"), Decimal("7.00"), Decimal("21.00"))
    assert speech.total == Decimal("41.00")  # the month's actual: 31.00 + 10.00
    assert "17.00 in those days, 7.00 counted" in speech.basis


def test_the_backtest_on_a_known_month_is_exact_once_a_week_is_inside_it(
        month, capsys, time_machine):
    time_machine.move_to(datetime(2026, 11, 20, tzinfo=UTC), tick=False)
    call_command("forecast_backtest", "--month", "2026-10")  # forecast_backtest() per day
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 team(s) with a non-zero month, total 1891.00"  # 1860.00 + 31.00
    days = {int(line.split()[0]): line.split()[2:] for line in out[2:-1]}
    assert list(days) == list(range(1, 31))
    # day 1: speech's window holds one day of seven, counted as the second busiest (0.00):
    # 1.00 for 31.00; day 2: 2.00 + 2.00 × 29/7 = 10.29
    assert days[1] == ["48.39%", "96.77%"]  # |1.00 - 31.00| / 31.00, and vision 0 %: mean
    assert days[2] == ["33.40%", "66.81%"]
    assert all(days[day] == ["0.00%", "0.00%"] for day in range(8, 31))
    assert out[-1] == ("RESULT forecast_mean_abs_error_from_day_10_max=0.0000 "
                       "forecast_mean_abs_error_from_day_10_mean=0.0000 "
                       "forecast_team_abs_error_from_day_10_max=0.0000")


def test_thresholds_fire_once_per_month_by_mail_to_the_leads(reserved_only, mailoutbox):
    month = reserved_only
    lead = month.lead()
    budget_set(team=month.vision, amount="1000", by=lead, now=OCT_11)
    fired = budgets_check(now=OCT_11)
    # 600.00 is 60 % (50 fires, 80 not); the forecast 1860.00 is 186 % (forecast 100 fires)
    assert sorted((a.basis, a.threshold, a.spent) for a in fired) == [
        ("actual", 50, Decimal("600.00")), ("forecast", 100, Decimal("1860.00"))]
    assert budgets_check(now=OCT_11 + H) == []  # once per threshold and month
    keys = set(MailDelivery.objects.filter(recipient=lead).values_list("key", flat=True))
    assert keys == {f"budget:{month.vision.id}:2026-10:actual:50",
                    f"budget:{month.vision.id}:2026-10:forecast:100"}
    assert len(mail_send_queued().sent) == 2
    subjects = sorted(message.subject for message in mailoutbox)
    assert subjects == ["[gpuquota] Vision: 100% of the 2026-10 budget forecast for the "
                        "month's end", "[gpuquota] Vision: 50% of the 2026-10 budget spent to "
                        "date"]
    assert "Forecast basis: 600.00 to date + 1260.00 for 504.00 booked" in mailoutbox[0].body
    fired = budgets_check(now=datetime(2026, 10, 25, tzinfo=UTC))  # 1440.00: 144 %
    assert sorted(a.threshold for a in fired) == [80, 100]
    status = team_budget_status(team=month.vision, now=datetime(2026, 10, 25, tzinfo=UTC))
    assert len(status.alerts) == 4 and status.actual_percent == 144


def test_a_budget_is_set_by_the_teams_leads_and_refuses_bad_input(reserved_only):
    month = reserved_only
    outsider = month.bob
    with pytest.raises(DomainError):
        budget_set(team=month.vision, amount="10", by=outsider, now=OCT_11)
    month.lead()
    for field, kwargs in [("amount", {"amount": "ten"}), ("amount", {"amount": "1.001"}),
                          ("amount", {"amount": "-1"}), ("thresholds", {"thresholds": "50,x"}),
                          ("thresholds", {"thresholds": "0"}),
                          ("valid_from", {"valid_from": datetime(2026, 9, 1).date()}),
                          ("currency", {"currency": "EU"})]:
        with pytest.raises(DomainError) as caught:
            budget_set(team=month.vision, by=month.alice, now=OCT_11,
                       **{"amount": "10", **kwargs})
        assert caught.value.field == field
    budget = budget_set(team=month.vision, amount="10.5", thresholds="100, 50", by=month.alice,
                        now=OCT_11)
    assert (budget.amount, budget.thresholds) == (Decimal("10.50"), [50, 100])
    assert BudgetAlert.objects.count() == 0


def test_the_budget_api_shows_the_month_and_sets_the_budget(month, time_machine):
    from django.test import Client

    from tests.factories import UserFactory
    from tests.helpers import assert_api_error
    time_machine.move_to(OCT_11, tick=False)
    lead = month.lead()
    member, outsider, carol = Client(), Client(), UserFactory(username="carol")
    Membership.objects.create(user=carol, team=month.vision, role="member", valid_from=EPOCH)
    member.force_login(carol)
    outsider.force_login(UserFactory(username="dave"))
    leader = Client()
    leader.force_login(lead)
    body = member.get("/api/v1/teams/vision/budget").json()
    assert (body["to_date"], body["forecast"]["amount"], body["budget"]) == (
        "600.00", "1860.00", None)
    assert body["forecast"]["booked_hours"] == "504.00" and body["energy_kwh"] == "0.000"
    assert member.put("/api/v1/teams/vision/budget", {"amount": "10"},
                      content_type="application/json").status_code == 403
    assert outsider.get("/api/v1/teams/vision/budget").status_code == 404
    assert_api_error(leader.put("/api/v1/teams/vision/budget", {"amount": "1,5"},
                                content_type="application/json"), 400, "amount")
    body = leader.put("/api/v1/teams/vision/budget",
                      {"amount": "1200", "thresholds": [50, 100]},
                      content_type="application/json").json()
    assert body["budget"] == {"amount": "1200.00", "currency": "USD", "valid_from": "2026-10",
                              "thresholds": [50, 100], "forecast_threshold": 100,
                              "action": "notify"}
    assert (body["actual_percent"], body["forecast_percent"]) == (50, 155)
    speech = Client()
    speech.force_login(month.bob)
    # ten days of two 180 kJ windows: 3.6 MJ
    assert speech.get("/api/v1/teams/speech/budget").json()["energy_kwh"] == "1.000"
