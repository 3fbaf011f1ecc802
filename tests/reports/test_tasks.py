"""Beat: on the 1st last month is drafted and admins are told; once the settlement delay
has passed with drafts left, admins are reminded once; open drafts are refreshed."""

from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import User
from gpuquota.celery import collect_beat_schedule
from reports.models import Statement
from reports.services_statements import statement_approve
from reports.tasks import (
    BEAT_SCHEDULE,
    statements_month_start_task,
    statements_refresh_open_task,
    statements_remind_unapproved_task,
)
from tests.factories import AdminFactory
from tests.reports.factories import OCT_3, SETTLED, H, h100, reserved_hours

pytestmark = pytest.mark.django_db
FIRST = datetime(2026, 11, 1, 0, 15, tzinfo=UTC)


@pytest.fixture
def month(roles, time_machine):
    time_machine.move_to(OCT_3 + 5 * H, tick=False)
    roles.gpu_class = h100()
    reserved_hours(roles.team, roles.gpu_class, OCT_3, 10)
    AdminFactory(username="admin2", email="admin2@example.org")
    return roles


def test_the_schedule_is_declared_and_collected():
    assert {name: entry["task"] for name, entry in BEAT_SCHEDULE.items()} == {
        "statements-month-start": "reports.statements_month_start",
        "statements-remind-unapproved": "reports.statements_remind_unapproved",
        "statements-refresh-open": "reports.statements_refresh_open",
        "statements-send-pending": "reports.statements_send_pending",
        "late-usage-scan": "reports.late_usage_scan",
        "budgets-check": "reports.budgets_check",
        "channels-send-due": "reports.channels_send_due",
    }
    start = BEAT_SCHEDULE["statements-month-start"]["schedule"]
    assert start.day_of_month == {1} and start.hour == {0}
    assert set(BEAT_SCHEDULE) <= set(collect_beat_schedule())


def test_refresh_drafts_the_current_month_to_date(month, time_machine):
    assert statements_refresh_open_task.delay().get() == {"2026-10": 1, "2026-09": 0}
    statement = Statement.objects.get()
    assert statement.computed_until == OCT_3 + 5 * H and statement.total == 12.5
    time_machine.move_to(OCT_3 + 8 * H, tick=False)
    statements_refresh_open_task.delay().get()
    statement.refresh_from_db()
    assert statement.total == 20 and Statement.objects.count() == 1


def test_month_start_drafts_and_tells_admins_once(month, time_machine, smtp_server):
    time_machine.move_to(FIRST, tick=False)
    result = statements_month_start_task.delay().get()
    assert (result["month"], result["statements"]) == ("2026-10", 1)
    statement = Statement.objects.get()
    assert (statement.total, statement.computed_until) == (25, datetime(2026, 11, 1,
                                                                          tzinfo=UTC))
    admins = sorted(User.objects.filter(is_staff=True).values_list("email", flat=True))
    assert "admin2@example.org" in admins and sorted(smtp_server.recipients()) == admins
    message = smtp_server.to("admin2@example.org")[0]
    assert message.message["Subject"] == ("Statements for October 2026 are ready for review "
                                          "(1 draft)")
    assert "/statements/review/?month=2026-10" in message.text()
    assert "approved from 2026-11-04 00:00," in message.text()
    assert "Times are in your time zone (UTC)" in message.text()
    statements_month_start_task.delay().get()  # a second run mails nobody again
    assert len(smtp_server.messages) == len(admins)


def test_reminded_once_after_the_settlement_delay(month, time_machine, smtp_server):
    time_machine.move_to(SETTLED - timedelta(seconds=1), tick=False)
    assert statements_remind_unapproved_task.delay().get() == {"reminded": False}  # no draft
    statements_month_start_task.delay().get()
    smtp_server.messages.clear()
    assert statements_remind_unapproved_task.delay().get() == {"reminded": False}  # too early
    time_machine.move_to(SETTLED + H, tick=False)
    assert statements_remind_unapproved_task.delay().get()["reminded"] is True
    assert statements_remind_unapproved_task.delay().get()["sent"] == []  # once
    assert len(smtp_server.messages) == User.objects.filter(is_staff=True).count()
    assert smtp_server.messages[0].message["Subject"] == (
        "Reminder: 1 statement for October 2026 still to approve")


def test_no_reminder_once_everything_is_approved(month, time_machine, smtp_server):
    time_machine.move_to(SETTLED + H, tick=False)
    statements_refresh_open_task.delay().get()
    statement_approve(statement=Statement.objects.get(month="2026-10-01"), by=month.admin)
    smtp_server.messages.clear()
    assert statements_remind_unapproved_task.delay().get() == {"reminded": False}
    assert smtp_server.messages == []
