"""The FOCUS export of a month (docs/budgets.md, "FOCUS export"), checked against the FOCUS
1.3 Cost and Usage columns as the specification lists them (which are mandatory, their
types, nullability and allowed values; `focus-validator`, which knows FOCUS 1.0 only, runs in
test_focus_validator), and reconciled with the statements to the cent.

October 2026 as in test_budgets: vision 1860.00 reserved (and a -12.34 adjustment),
speech 31.00 on demand with 3.100 kWh (62 windows of 180 kJ)."""

import csv
import io
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from reports.focus import COMPATIBILITY, MANDATORY, OPTIONAL
from reports.models import Statement
from reports.services_statements import adjustment_add, statements_draft_month
from tests.factories import AdminFactory
from tests.reports.test_budgets import OCTOBER, Month

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 5, tzinfo=UTC)
INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
DECIMAL = re.compile(r"-?\d+(\.\d+)?")
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
FREQUENCIES = {"One-Time", "Recurring", "Usage-Based"}
PRICING_CATEGORIES = {"Standard", "Dynamic", "Committed", "Other"}
SERVICE_CATEGORIES = {
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases",
    "Developer Tools", "Multicloud", "Identity", "Integration", "Internet of Things",
    "Management and Governance", "Media", "Migration", "Mobile", "Networking", "Security",
    "Storage", "Web", "Other"}
COSTS = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost")
NOT_NULL = (*COSTS, "BillingAccountId", "BillingAccountName", "BillingCurrency",
            "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeDescription",
            "ChargePeriodEnd", "ChargePeriodStart", "InvoiceIssuerName", "ServiceCategory",
            "ServiceName", "ServiceProviderName")


def focus_problems(header: list[str], rows: list[dict]) -> list[str]:
    """What breaks the FOCUS 1.3 rules we check: columns, types, nulls, allowed values."""
    problems = [f"missing {c}" for c in MANDATORY if c not in header]
    named = {*MANDATORY, *OPTIONAL, *COMPATIBILITY}
    problems += [f"custom column {c} without x_" for c in header
                 if c not in named and not c.startswith("x_")]
    for n, row in enumerate(rows):
        problems += [f"row {n}: {c} is null" for c in NOT_NULL if not row[c]]
        problems += [f"row {n}: {c} not a decimal" for c in (*COSTS, "PricingQuantity",
                                                              "ConsumedQuantity")
                     if row[c] and not DECIMAL.fullmatch(row[c])]
        problems += [f"row {n}: {c} not an instant" for c in (
            "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
            if not INSTANT.fullmatch(row[c])]
        if row["ChargePeriodStart"] >= row["ChargePeriodEnd"]:
            problems.append(f"row {n}: charge period empty")
        checks = [("ChargeCategory", CHARGE_CATEGORIES), ("ChargeFrequency", FREQUENCIES),
                  ("ServiceCategory", SERVICE_CATEGORIES)]
        problems += [f"row {n}: {c}={row[c]!r}" for c, allowed in checks
                     if row[c] and row[c] not in allowed]
        if row["ChargeClass"] not in ("", "Correction"):
            problems.append(f"row {n}: ChargeClass={row['ChargeClass']!r}")
        if row["PricingCategory"] and row["PricingCategory"] not in PRICING_CATEGORIES:
            problems.append(f"row {n}: PricingCategory={row['PricingCategory']!r}")
        if row["PricingCategory"] and not row["SkuPriceId"]:
            problems.append(f"row {n}: PricingCategory without SkuPriceId")
        if row["ChargeCategory"] == "Usage" and not (
                row["PricingCategory"] and row["PricingQuantity"] and row["PricingUnit"]
                and row["ConsumedQuantity"] and row["ConsumedUnit"]):
            problems.append(f"row {n}: a usage row without its quantities or pricing")
        if not re.fullmatch(r"[A-Z]{3}", row["BillingCurrency"]):
            problems.append(f"row {n}: BillingCurrency={row['BillingCurrency']!r}")
    return problems


@pytest.fixture
def october(db, time_machine):
    month = Month()
    time_machine.move_to(NOW, tick=False)
    admin = AdminFactory()
    adjustment_add(team=month.vision, period=OCTOBER, amount="-12.34",
                   reason="=goodwill, for the outage", by=admin)
    statements_draft_month(period=OCTOBER, now=NOW)
    month.admin = admin
    return month


def test_the_focus_csv_follows_the_columns_and_reconciles_to_the_cent(october):
    client = Client()
    client.force_login(october.admin)
    response = client.get("/api/v1/focus/2026-10.csv")
    assert response.status_code == 200
    reader = csv.DictReader(io.StringIO(response.content.decode()))
    rows = list(reader)
    assert focus_problems(reader.fieldnames, rows) == []
    totals = {s.team_slug: s.total for s in Statement.objects.filter(month=OCTOBER.start)}
    billed: dict[str, Decimal] = {}
    for row in rows:
        billed[row["SubAccountId"]] = billed.get(row["SubAccountId"], 0) + Decimal(
            row["BilledCost"])
    assert billed == totals == {"vision": Decimal("1847.66"), "speech": Decimal("31.00")}
    by_kind = {(r["SubAccountId"], r["x_ChargeKind"]): r for r in rows}
    reserved = by_kind[("vision", "reserved")]
    assert (reserved["ChargeCategory"], reserved["PricingQuantity"], reserved["PricingUnit"],
            reserved["ListUnitPrice"], reserved["x_GpuClass"]) == (
        "Usage", "744.000000", "GPU-Hours", "2.50", "H100-80GB")
    adjustment = by_kind[("vision", "adjustment")]
    assert adjustment["ChargeCategory"] == "Adjustment" and adjustment["PricingQuantity"] == ""
    assert adjustment["ChargeDescription"] == "Adjustment: =goodwill, for the outage"
    assert "'=goodwill" not in response.content.decode()  # not at the start of a cell
    on_demand = by_kind[("speech", "on_demand")]
    assert on_demand["x_EnergyKWh"] == "3.100" and on_demand["BilledCost"] == "31.00"
    assert reserved["x_EnergyKWh"] == "0.000"  # its GPU reported no energy


def test_the_focus_json_and_who_sees_what(october):
    client = Client()
    client.force_login(october.bob)  # a member of speech
    body = client.get("/api/v1/focus/2026-10").json()
    assert body["focus_version"] == "1.3"
    assert {row["SubAccountId"] for row in body["rows"]} == {"speech"}
    assert client.get("/api/v1/focus/2026-13.csv").json()["errors"][0]["field"] == "period"
    page = client.get("/statements/speech/2026-10/").content.decode()
    assert 'id="energy">3.100 kWh' in page  # kept on the statement's lines when drafted
    assert Client().get("/api/v1/focus/2026-10.csv").status_code in (401, 403, 404)
