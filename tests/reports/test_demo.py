"""The demo's last month, whatever today's date (here the 1st of January, so last month is
December of the year before): drafts with reserved, failure-credit and on-demand lines,
approvable once the demo's shortened settlement delay has passed, sent to the leads."""

from datetime import UTC, datetime

import pytest

from gpuquota.core.timeutil import Period
from gpuquota.demo.last_month import demo_last_month_seed
from gpuquota.demo.organisation import demo_organisation_seed
from gpuquota.inventory.models import GpuHealthInterval
from reports.demo import demo_statements_draft
from reports.models import Statement
from reports.sending import statement_send
from reports.services_statements import statements_approve_month
from tests.reports.factories import H

pytestmark = pytest.mark.django_db
NEW_YEAR = datetime(2027, 1, 1, 0, 30, tzinfo=UTC)


def test_last_month_has_every_kind_of_line_and_can_be_closed(time_machine, settings,
                                                               smtp_server):
    time_machine.move_to(NEW_YEAR, tick=False)
    demo_organisation_seed()
    demo_last_month_seed(now=NEW_YEAR)
    drafts = demo_statements_draft(now=NEW_YEAR)
    assert {s.month.isoformat() for s in drafts} == {"2026-12-01"}
    kinds = {line.kind for s in drafts for line in s.lines.all()}
    assert kinds == {"reserved", "failure_credit", "on_demand"}
    assert all(not s.error for s in drafts)
    [failed] = GpuHealthInterval.objects.filter(state="failed")
    assert (failed.valid_from, failed.valid_until) == (datetime(2026, 12, 9, 9, tzinfo=UTC),
                                                       datetime(2026, 12, 9, 12, tzinfo=UTC))
    vision = Statement.objects.get(team_slug="vision")
    assert [(line.kind, line.seconds) for line in vision.lines.all()
            if line.kind != "reserved"] == [("failure_credit", 3 * 3600),
                                            ("on_demand", 4 * 3600)]
    demo_last_month_seed(now=NEW_YEAR)  # idempotent
    again = demo_statements_draft(now=NEW_YEAR)
    assert [(s.pk, s.total) for s in again] == [(s.pk, s.total) for s in drafts]

    settings.SETTLEMENT_DELAY_HOURS = 0  # what `make demo` sets
    approved, refused = statements_approve_month(period=Period.month(2026, 12), by=None,
                                                 now=NEW_YEAR + H)
    assert len(approved) == 4 and refused == []
    assert statement_send(statement=vision).complete
    vision.refresh_from_db()
    assert vision.status == "sent"
    [message] = smtp_server.messages
    assert set(message.attachments()) == {"statement-vision-2026-12.pdf",
                                          "statement-vision-2026-12.csv"}
