"""The hand-computed October (tests/reports/scenario.py) to the cent, through the
statement services; adjustments; late usage after approval."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from reports.models import Statement
from reports.services_statements import adjustment_add, statement_draft, statements_draft_month
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


def test_redrafting_replaces_the_lines_and_a_team_is_drafted_alone(time_machine):
    month = october_build(time_machine)
    first = statement_draft(team=month.vision, period=OCTOBER)
    again = statement_draft(team=month.vision, period=OCTOBER)
    assert first.pk == again.pk
    assert Statement.objects.count() == 1
    assert lines(again) == VISION_LINES[:-1]
    assert again.total == d("2023.85")
