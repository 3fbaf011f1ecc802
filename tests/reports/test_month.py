"""The hand-computed October (tests/reports/scenario.py) to the cent, through the
statement services; adjustments; late usage after approval."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from reports.models import Statement
from reports.services_statements import adjustment_add, statement_draft, statements_draft_month
from tests.helpers import csv_lines
from tests.reports.scenario import FAILED_AT, REBOOT_SAMPLE_AT, october_build

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
OCTOBER = Period.month(2026, 10)


def lines(statement):
    return [(line.kind, line.gpu_class_name, line.seconds, line.rate, line.amount, line.reason)
            for line in statement.lines.order_by("position")]


def d(text):
    return Decimal(text)


VISION_LINES = [
    ("reserved", "H100-80GB", 1_355_400, d("2.5000"), d("941.25"), ""),
    ("reserved", "H100-80GB", 1_423_800, d("2.7500"), d("1087.63"), ""),
    ("failure_credit", "H100-80GB", 11_700, d("2.7500"), d("-8.94"), ""),
    ("on_demand", "A100-40GB", 2_700, d("1.7500"), d("1.31"), ""),
    ("on_demand", "H100-80GB", 1_200, d("3.0000"), d("1.00"), ""),
    ("on_demand", "H100-80GB", 1_804, d("3.2000"), d("1.60"), ""),
    ("adjustment", "", None, None, d("-100.00"), "Goodwill credit for the outage"),
]


def test_october_to_the_cent(time_machine):
    month = october_build(time_machine)
    failed = GpuHealthInterval.objects.get(state="failed")
    assert (failed.valid_from, failed.valid_until) == (FAILED_AT, REBOOT_SAMPLE_AT)

    adjustment_add(team=month.vision, period=OCTOBER, amount="-100.00",
                   reason="Goodwill credit for the outage", by=month.admin)
    statements = {s.team_slug: s for s in statements_draft_month(period=OCTOBER)}
    assert set(statements) == {"vision", "speech", "robotics"}

    vision = statements["vision"]
    assert lines(vision) == VISION_LINES
    assert (vision.total, vision.currency, vision.error) == (d("1923.85"), "USD", "")
    assert (vision.team_name, vision.team_slug, vision.cost_center) == ("Vision", "vision",
                                                                        "CC-100")
    assert (vision.reserved_s, vision.covered_s, vision.busy_s) == (2_779_200, 120, 120)
    assert vision.computed_until == datetime(2026, 11, 1, tzinfo=UTC)

    assert lines(statements["speech"]) == [
        ("on_demand", "A100-40GB", 900, d("1.7500"), d("0.44"), "")]
    assert statements["speech"].total == d("0.44")
    # 3.5 s of a Slurm job: shown as 4 s, priced exactly (0.0031…): a line of 0.00.
    assert lines(statements["robotics"]) == [
        ("on_demand", "H100-80GB", 4, d("3.2000"), d("0.00"), "")]

    # drafted again, alone: the same statement, the same lines
    again = statement_draft(team=month.vision, period=OCTOBER)
    assert again.pk == vision.pk and lines(again) == VISION_LINES
    assert Statement.objects.count() == 3

    client = Client()
    client.force_login(month.vision_lead)
    assert client.get("/api/v1/statements/vision/2026-10").json() == VISION_JSON
    response = client.get("/api/v1/statements/vision/2026-10.csv")
    assert response["Content-Type"].startswith("text/csv")
    # the specification's thirteen columns as they always were; energy and CO2e follow them
    assert spec_columns(csv_lines(response.content.decode())) == VISION_CSV.splitlines()
    client.force_login(month.admin)
    everyone = client.get("/api/v1/statements/2026-10").json()
    assert [s["team"] for s in everyone["statements"]] == ["robotics", "speech", "vision"]
    assert everyone["statements"][2] == VISION_JSON
    organisation_csv = spec_columns(csv_lines(
        client.get("/api/v1/statements/2026-10.csv").content.decode()))
    assert organisation_csv[0] == ",".join(
        ["team", "period", "currency", "kind", "gpu_class", "seconds", "hours", "rate",
         "amount", "reason", "cost_center", "status", "approved_at"])
    assert organisation_csv[1:] == [
        "robotics,2026-10,USD,on_demand,H100-80GB,4,0.00,3.20,0.00,,CC-300,draft,",
        "speech,2026-10,USD,on_demand,A100-40GB,900,0.25,1.75,0.44,,CC-200,draft,",
        *VISION_CSV.splitlines()[1:]]


def spec_columns(rows: list[str]) -> list[str]:
    """The first 13 cells of each row (no cell here holds a comma)."""
    return [",".join(row.split(",")[:13]) for row in rows]


VISION_JSON = {
    "team": "vision", "period": "2026-10", "currency": "USD", "status": "draft",
    "lines": [
        {"kind": "reserved", "gpu_class": "H100-80GB", "seconds": 1355400, "hours": "376.50",
         "rate": "2.50", "amount": "941.25"},
        {"kind": "reserved", "gpu_class": "H100-80GB", "seconds": 1423800, "hours": "395.50",
         "rate": "2.75", "amount": "1087.63"},
        {"kind": "failure_credit", "gpu_class": "H100-80GB", "seconds": 11700, "hours": "3.25",
         "rate": "2.75", "amount": "-8.94"},
        {"kind": "on_demand", "gpu_class": "A100-40GB", "seconds": 2700, "hours": "0.75",
         "rate": "1.75", "amount": "1.31"},
        {"kind": "on_demand", "gpu_class": "H100-80GB", "seconds": 1200, "hours": "0.33",
         "rate": "3.00", "amount": "1.00"},
        {"kind": "on_demand", "gpu_class": "H100-80GB", "seconds": 1804, "hours": "0.50",
         "rate": "3.20", "amount": "1.60"},
        {"kind": "adjustment", "gpu_class": None, "seconds": None, "hours": None, "rate": None,
         "amount": "-100.00", "reason": "Goodwill credit for the outage"}],
    "total": "1923.85",
    "utilization": {"reserved_hours": "772.00", "busy_hours": "0.03", "utilization": "0.0000",
                    "coverage": "0.0000", "lent_hours": "0.00", "lent_busy_hours": "0.00"},
    "cost_center": "CC-100", "approved_at": None, "number": None,
}
VISION_CSV = (
    "team,period,currency,kind,gpu_class,seconds,hours,rate,amount,reason,cost_center,status,"
    "approved_at\r\n"
    "vision,2026-10,USD,reserved,H100-80GB,1355400,376.50,2.50,941.25,,CC-100,draft,\r\n"
    "vision,2026-10,USD,reserved,H100-80GB,1423800,395.50,2.75,1087.63,,CC-100,draft,\r\n"
    "vision,2026-10,USD,failure_credit,H100-80GB,11700,3.25,2.75,-8.94,,CC-100,draft,\r\n"
    "vision,2026-10,USD,on_demand,A100-40GB,2700,0.75,1.75,1.31,,CC-100,draft,\r\n"
    "vision,2026-10,USD,on_demand,H100-80GB,1200,0.33,3.00,1.00,,CC-100,draft,\r\n"
    "vision,2026-10,USD,on_demand,H100-80GB,1804,0.50,3.20,1.60,,CC-100,draft,\r\n"
    "vision,2026-10,USD,adjustment,,,,,-100.00,Goodwill credit for the outage,CC-100,draft,\r\n"
)
