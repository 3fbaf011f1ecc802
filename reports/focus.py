"""The FOCUS export of a month (docs/budgets.md, "FOCUS export"): the statements' lines as
rows of a FinOps FOCUS 1.3 Cost and Usage dataset, one row per statement line (team × GPU
class × kind of charge × rate), so that BilledCost adds up to the statements to the cent.
Read from the stored statements only, as the statement export is.

Mapping (no discounts exist, so ListCost = ContractedCost = EffectiveCost = BilledCost):
- reserved, on_demand, borrowed → ChargeCategory `Usage`, PricingCategory `Standard`;
- failure_credit, lending_credit → `Credit`; an adjustment → `Adjustment` (ChargeClass
  `Correction` when it settles an approved month's late usage);
- quantities in `GPU-Hours` (seconds ÷ 3600, exact to the second: 6 places);
- the organisation is billing account, service provider, host provider and invoice issuer;
  the team is the sub account; the statement (team, month) is the invoice;
- `x_` columns: GPU class, kind, seconds, GPU-hours, cost center, statement status, and the
  energy (kWh) the line kept when it was drafted, its facility energy (× PUE), kg CO2e, and
  on reserved lines the idle-reserved part of both (information: no amount uses them)."""

from decimal import Decimal

from gpuquota.core.csvsafe import csv_document
from gpuquota.core.timeutil import Period
from reports import conf
from reports.export import instant_text, rate_text
from reports.models import Statement, StatementLine

Kind = StatementLine.Kind
FOCUS_VERSION = "1.3"

#: The Cost and Usage columns FOCUS 1.3 marks Mandatory.
MANDATORY = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost",
    "EffectiveCost", "HostProviderName", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ServiceCategory", "ServiceName", "ServiceProviderName",
]
#: Conditional and recommended columns that apply to GPU time.
OPTIONAL = [
    "BillingAccountType", "ChargeFrequency", "ConsumedQuantity", "ConsumedUnit",
    "ContractedUnitPrice", "InvoiceId", "ListUnitPrice", "PricingCategory", "ResourceType",
    "ServiceSubcategory", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType",
]
#: FOCUS 1.0's mandatory provider columns, which 1.3 deprecates for ServiceProviderName
#: and HostProviderName: kept so a FOCUS 1.0 reader (and its validator) finds them.
COMPATIBILITY = ["ProviderName", "PublisherName"]
CUSTOM = ["x_ChargeKind", "x_CostCenter", "x_EnergyKWh", "x_GpuClass", "x_GpuHours",
          "x_Seconds", "x_StatementStatus", "x_FacilityEnergyKWh", "x_CarbonKgCO2e",
          "x_IdleReservedEnergyKWh", "x_IdleReservedCarbonKgCO2e"]
COLUMNS = sorted(MANDATORY + OPTIONAL + COMPATIBILITY) + CUSTOM

CATEGORY = {Kind.RESERVED: "Usage", Kind.ON_DEMAND: "Usage", Kind.BORROWED: "Usage",
            Kind.FAILURE_CREDIT: "Credit", Kind.LENDING_CREDIT: "Credit",
            Kind.ADJUSTMENT: "Adjustment"}
DESCRIBED = {Kind.RESERVED: "Reserved {cls} GPU-hours at {rate} per GPU-hour",
             Kind.ON_DEMAND: "On-demand busy {cls} GPU-hours at {rate} per GPU-hour",
             Kind.BORROWED: "Borrowed busy {cls} GPU-hours at {rate} per GPU-hour",
             Kind.FAILURE_CREDIT: "Credit for failed reserved {cls} GPU-hours at {rate}",
             Kind.LENDING_CREDIT: "Credit for lent {cls} GPU-hours borrowed at {rate}"}
UNIT = "GPU-Hours"
SERVICE = "GPU compute"
HOUR_PLACES = Decimal("0.000001")


def _hours(seconds: int) -> Decimal:
    return (Decimal(seconds) / 3600).quantize(HOUR_PLACES)  # exact: 1 s = 0.000277…


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _row(statement: Statement, line: StatementLine, period: Period, energy: Decimal | None,
         organisation: str) -> dict:
    priced = line.kind != Kind.ADJUSTMENT
    usage = CATEGORY[line.kind] == "Usage"
    amount = str(line.amount)
    until = min(period.end, statement.computed_until)
    hours = _hours(line.seconds) if priced else None
    sku = f"{line.gpu_class_name}/{line.kind}" if priced else None
    correction = line.adjustment_id and line.adjustment and line.adjustment.corrects_id
    return {
        "BilledCost": amount, "EffectiveCost": amount, "ListCost": amount,
        "ContractedCost": amount, "BillingCurrency": statement.currency,
        "BillingAccountId": organisation, "BillingAccountName": organisation,
        "BillingAccountType": "Organisation",
        "BillingPeriodStart": instant_text(period.start),
        "BillingPeriodEnd": instant_text(period.end),
        "ChargePeriodStart": instant_text(period.start), "ChargePeriodEnd": instant_text(until),
        "ChargeCategory": CATEGORY[line.kind],
        "ChargeClass": "Correction" if correction else None,
        "ChargeDescription": (DESCRIBED[line.kind].format(cls=line.gpu_class_name,
                                                          rate=rate_text(line.rate))
                              if priced else f"Adjustment: {line.reason}"),
        "ChargeFrequency": "Usage-Based" if priced else "One-Time",
        "ConsumedQuantity": str(hours) if usage else None,
        "ConsumedUnit": UNIT if usage else None,
        "PricingQuantity": str(hours) if priced else None,
        "PricingUnit": UNIT if priced else None,
        "ListUnitPrice": rate_text(line.rate) if priced else None,
        "ContractedUnitPrice": rate_text(line.rate) if priced else None,
        "PricingCategory": "Standard" if priced else None,
        "SkuId": sku, "SkuPriceId": f"{sku}@{rate_text(line.rate)}" if priced else None,
        "ServiceCategory": "Compute", "ServiceSubcategory": "Other (Compute)",
        "ServiceName": SERVICE,
        "ServiceProviderName": organisation, "HostProviderName": organisation,
        "InvoiceIssuerName": organisation, "ProviderName": organisation,
        "PublisherName": organisation,
        "InvoiceId": statement.number or f"{statement.team_slug}-{statement.period_label}",
        "ResourceType": "GPU" if priced else None,
        "SubAccountId": statement.team_slug, "SubAccountName": statement.team_name,
        "SubAccountType": "Team",
        "x_ChargeKind": line.kind, "x_CostCenter": statement.cost_center or None,
        "x_EnergyKWh": None if energy is None else str(energy),
        "x_GpuClass": line.gpu_class_name or None,
        "x_GpuHours": str(hours) if priced else None,
        "x_Seconds": line.seconds, "x_StatementStatus": statement.status,
        "x_FacilityEnergyKWh": _text(line.facility_energy_kwh),
        "x_CarbonKgCO2e": _text(line.co2e_kg),
        "x_IdleReservedEnergyKWh": _text(line.idle_energy_kwh),
        "x_IdleReservedCarbonKgCO2e": _text(line.idle_co2e_kg),
    }


def focus_rows(*, statements: list[Statement], period: Period) -> list[dict]:
    """The FOCUS rows of these statements of `period` (failed drafts have no lines)."""
    organisation = conf.organisation_name()
    rows = []
    for statement in statements:
        lines = sorted(statement.lines.select_related("adjustment"), key=lambda x: x.position)
        rows += [_row(statement, line, period, line.energy_kwh, organisation)
                 for line in lines]
    return rows


def focus_csv(rows: list[dict]) -> str:
    """The rows as CSV in `COLUMNS` order (null as an empty cell)."""
    return csv_document(COLUMNS, [[row[c] for c in COLUMNS] for row in rows])

