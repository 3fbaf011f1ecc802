"""The FOCUS export checked by the FinOps Foundation's `focus-validator` (1.0.0, which knows
FOCUS 1.0; docs/budgets.md, "FOCUS export"): its 1.0 rules run on the columns of our export
that FOCUS 1.0 knows (1.3's own columns, types and values are checked by test_focus)."""

import csv
import io
from pathlib import Path

import pytest
from django.test import Client

from tests.reports.test_carbon import month  # noqa: F401 (the fixture)

pytest.importorskip("focus_validator", reason="focus-validator (requirements-dev.txt)")
import pandas as pd  # noqa: E402 (comes with focus-validator)
from focus_validator.config_objects.common import ChecklistObjectStatus  # noqa: E402
from focus_validator.config_objects.override import Override  # noqa: E402
from focus_validator.rules.spec_rules import SpecRules  # noqa: E402
from focus_validator.validator import DEFAULT_VERSION_SETS_PATH  # noqa: E402

pytestmark = pytest.mark.django_db
#: Where the validator's 1.0 rules name a column otherwise than our export (which follows
#: the 1.0 and 1.3 specifications: InvoiceIssuerName, ProviderName, PublisherName).
RENAMED = {"InvoiceIssuerName": "InvoiceIssuer", "ProviderName": "Provider",
           "PublisherName": "Publisher"}
#: A 1.0 rule of the validator that queries `ChargeType`, a pre-1.0 column (1.0 calls it
#: ChargeCategory): it fails on any 1.0 file. Its rule (a usage row has a SkuPriceId) is
#: checked below on ChargeCategory instead.
BROKEN = {"SkuPriceId_Nullable"}


@pytest.fixture
def currency_codes(monkeypatch):
    """The validator reads its ISO 4217 list by a path relative to the working directory
    (`focus_validator/utils/currency_codes.csv`): read the packaged file wherever we run."""
    from focus_validator.rules import checks

    packaged = Path(checks.__file__).parent.parent / "utils" / "currency_codes.csv"
    codes = set(pd.read_csv(packaged)["currency_codes"].values)
    assert "USD" in codes and "EUR" in codes
    monkeypatch.setattr(checks, "get_currency_codes", lambda: codes)


def test_the_export_passes_the_focus_validators_1_0_rules(month, currency_codes):  # noqa: F811
    client = Client()
    client.force_login(month["admin"])
    text = client.get("/api/v1/focus/2026-10.csv").content.decode()
    rules = SpecRules(override_filename=None, rule_set_path=DEFAULT_VERSION_SETS_PATH,
                      rules_version="1.0", column_namespace=None)
    rules.load()
    known = {rule.column_id for rule in rules.rules}
    header = next(csv.reader(io.StringIO(text)))
    ours = [c for c in header if RENAMED.get(c, c) in known]
    absent = known - {RENAMED.get(c, c) for c in ours}
    # a column 1.0 requires that a GPU chargeback has not (zones, regions, resources,
    # commitment discounts, tags): its "required" check is skipped, all else runs
    rules.override_config = Override(overrides=[
        rule.check_id for rule in rules.rules
        if rule.column_id in absent and rule.check == "column_required"
        or rule.check_id in BROKEN])
    frame = pd.read_csv(io.StringIO(text), usecols=ours).rename(columns=RENAMED)
    result = rules.validate(frame)
    statuses = {name: check.status for name, check in result.checklist.items()}
    failed = {name: s.value for name, s in statuses.items()
              if s not in (ChecklistObjectStatus.PASSED, ChecklistObjectStatus.SKIPPED)}
    assert failed == {}
    usage = frame[frame["ChargeCategory"] == "Usage"]
    assert len(usage) and usage["SkuPriceId"].notna().all()  # BROKEN's rule, on 1.0's column
    ran = [name for name, s in statuses.items() if s == ChecklistObjectStatus.PASSED]
    assert len(ran) >= 120, ran  # of 133 checks: 122 pass, the rest skipped as above
    assert sorted(absent) == ["AvailabilityZone", "CommitmentDiscountCategory",
                              "CommitmentDiscountId", "CommitmentDiscountName",
                              "CommitmentDiscountStatus", "CommitmentDiscountType", "RegionId",
                              "RegionName", "ResourceID", "ResourceName", "Tags"]
