"""The read-only finance role (docs/chargeback.md, "The finance role"): every page and API
of the product, read as finance, answers as it does for a signed-in outsider, except the
money ones, which finance reads for every team like an admin; nothing it posts changes
anything."""

import re

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from gpuquota.core.models import AuditEntry
from reports.budgets import budget_set
from reports.models import Statement
from reports.services_statements import statement_draft
from tests.reports.factories import OCT_3, OCTOBER, SETTLED, h100, reserved_hours

pytestmark = pytest.mark.django_db
FINANCE_READS = {  # finance: 200; an outsider: 404 (or 401 from the API)
    "/statements/review/", "/statements/vision/2026-10/", "/statements/vision/2026-10.csv",
    "/statements/vision/2026-10.pdf", "/api/v1/statements/2026-10",
    "/api/v1/statements/2026-10.csv", "/api/v1/statements/vision/2026-10",
    "/api/v1/statements/vision/2026-10.csv", "/api/v1/statements/vision/2026-10.pdf",
    "/api/v1/focus/2026-10", "/api/v1/focus/2026-10.csv", "/api/v1/teams/vision/budget",
}
SKIP = re.compile(r"^(admin/.+|healthz|readyz|metrics|favicon.ico|api/v1/agent/|.*/stream)")
ARGUMENTS = [(re.compile(r"<(slug:)?(slug|team)>"), "vision"),
             (re.compile(r"<(str:)?(period|month)>"), "2026-10"),
             (re.compile(r"<(int|path|str|slug|uuid):[a-z_]+>|<[a-z_]+>"), "1")]


def _paths() -> list[str]:
    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)
    found = set()
    for raw in walk(get_resolver().url_patterns):
        if SKIP.match(raw) or raw.startswith("^"):
            continue
        for pattern, value in ARGUMENTS:
            raw = pattern.sub(value, raw)
        found.add("/" + raw)
    return sorted(found)


@pytest.fixture
def billed(roles, time_machine):
    time_machine.move_to(SETTLED, tick=False)
    roles.gpu_class = h100()
    reserved_hours(roles.team, roles.gpu_class, OCT_3, 10)
    reserved_hours(roles.other_team, roles.gpu_class, OCT_3, 4)
    for team in (roles.team, roles.other_team):
        statement_draft(team=team, period=OCTOBER)
    return roles


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_finance_reads_the_money_and_nothing_else(billed):
    finance, outsider = _client(billed.finance), _client(billed.outsider)
    paths = _paths()
    assert FINANCE_READS <= set(paths), FINANCE_READS - set(paths)
    assert "/teams/vision/" in paths and "/reservations/new/" in paths
    differ = []
    for path in paths:
        as_finance = finance.get(path).status_code
        if path in FINANCE_READS:
            assert as_finance == 200, path
            assert outsider.get(path).status_code in (401, 404), path
        elif as_finance != outsider.get(path).status_code:
            differ.append(path)
    assert differ == []
    teams = {row["SubAccountId"] for row in finance.get("/api/v1/focus/2026-10").json()["rows"]}
    assert teams == {"vision", "speech"}  # every team, as an admin reads it
    review = finance.get("/statements/review/?month=2026-10").content.decode()
    assert 'id="read-only"' in review and "statements_approve" not in review
    assert "approve-all-submit" not in review and 'id="nav-finance-statements"' in review


def test_nothing_finance_posts_changes_anything(billed):
    finance = _client(billed.finance)
    statement = Statement.objects.get(team=billed.team)
    assert finance.post("/statements/vision/2026-10/approve/").status_code == 404
    assert finance.post("/statements/review/approve/", {"month": "2026-10"}).status_code == 404
    assert finance.post("/statements/review/draft/", {"month": "2026-10"}).status_code == 404
    assert finance.put("/api/v1/teams/vision/budget", {"amount": "1"},
                       content_type="application/json").status_code == 404
    assert finance.put("/api/v1/teams/vision/budget/hours", {"gpu_class": "H100-80GB",
                       "hours": "1"}, content_type="application/json").status_code == 404
    assert finance.post("/teams/vision/budget/hours/", {"gpu_class": "H100-80GB",
                        "hours": "1"}).status_code == 404
    assert finance.post("/api/v1/reservations", {
        "team": "vision", "gpu_class": "H100-80GB", "count": 1,
        "start": "2026-11-05T00:00:00Z", "end": "2026-11-05T02:00:00Z"},
        content_type="application/json").status_code in (403, 404)
    statement.refresh_from_db()
    assert statement.status == "draft"
    budget_set(team=billed.team, amount="100", by=billed.lead, action="refuse")
    assert finance.get("/api/v1/teams/vision/budget").json()["budget"]["amount"] == "100.00"
    review = finance.get("/statements/review/?month=2026-11").content.decode()
    assert 'id="review-budgets"' in review and "Refuse reservations that" in review
    from reports.hour_budgets import class_hours_budget_set
    class_hours_budget_set(team=billed.team, gpu_class=billed.gpu_class, hours="50",
                           by=billed.lead)
    review = finance.get("/statements/review/?month=2026-11").content.decode()
    assert 'id="review-class-hour-budgets"' in review and ">50.00<" in review


def test_the_role_is_granted_and_taken_back_audited(billed):
    call_command("finance_role", "outsider")
    billed.outsider.refresh_from_db()
    assert billed.outsider.is_finance
    assert _client(billed.outsider).get("/api/v1/statements/vision/2026-10").status_code == 200
    call_command("finance_role", "outsider", "--revoke")
    billed.outsider.refresh_from_db()
    assert not billed.outsider.is_finance
    assert AuditEntry.objects.filter(action="user.finance_role").count() == 2
