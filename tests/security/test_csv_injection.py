"""CSV (formula) injection: no cell of any CSV the product writes (the web download, the API,
the organisation's month, the mail attachment) can start a formula in finance's spreadsheet,
and every file still parses back to the same data."""

import csv
import io

import pytest
from django.test import Client

from gpuquota.core.csvsafe import csv_cell, csv_document
from reports.export import CSV_COLUMNS
from reports.focus import COLUMNS as FOCUS_COLUMNS
from reports.sending import statement_send
from tests.security.conftest import FORMULAS, HOSTILE_COST_CENTER, MARKUP

pytestmark = [pytest.mark.django_db]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\0", "\uff1d", "\uff0b", "\uff0d",
                  "\uff20")


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def _assert_safe(text: str, columns: list[str]) -> list[dict]:
    """Every cell quoted, none starting a formula (plain numbers excepted); the rows."""
    rows = _rows(text)
    assert rows[0] == columns
    for line in text.split("\r\n")[:-1]:
        assert line.startswith('"') and line.endswith('"'), line
    for row in rows[1:]:
        assert len(row) == len(columns)
        for cell in row:
            if cell.lstrip(" ").startswith(FORMULA_STARTS):
                float(cell)  # a number (an amount) is data; anything else fails here
    return [dict(zip(columns, row, strict=True)) for row in rows[1:]]


def _assert_hostile_reasons_neutralised(records: list[dict]) -> None:
    reasons = [r["reason"] for r in records if r["kind"] == "adjustment"]
    expected = [f"'{reason.strip()}" if reason.strip()[0] in "=+-@\uff1d" else reason.strip()
                for reason in FORMULAS + MARKUP]
    assert sorted(reasons) == sorted(expected)
    assert "ok;=1+1" in reasons  # not split: the separator stays inside its quoted cell
    amounts = sorted(r["amount"] for r in records if r["kind"] == "adjustment")
    assert amounts[:2] == ["-0.25", "-1.25"]  # numbers stay numbers


def test_every_csv_the_product_writes_is_neutralised(hostile_statement, roles, smtp_server):
    lead, admin = Client(), Client()
    lead.force_login(roles.lead)
    admin.force_login(roles.admin)
    files = {
        "api": lead.get("/api/v1/statements/vision/2026-10.csv"),
        "web": lead.get("/statements/vision/2026-10.csv"),
        "organisation": admin.get("/api/v1/statements/2026-10.csv"),
    }
    for name, response in files.items():
        assert response.status_code == 200, name
    for name in ("api", "web"):
        _assert_hostile_reasons_neutralised(_assert_safe(files[name].content.decode(),
                                                         CSV_COLUMNS))
    organisation = _assert_safe(files["organisation"].content.decode(), CSV_COLUMNS)
    _assert_hostile_reasons_neutralised(organisation)
    assert {r["cost_center"] for r in organisation} == {f"'{HOSTILE_COST_CENTER}"}
    focus_rows = _assert_safe(admin.get("/api/v1/focus/2026-10.csv").content.decode(),
                              FOCUS_COLUMNS)  # the FOCUS export too
    assert {r["x_CostCenter"] for r in focus_rows} == {f"'{HOSTILE_COST_CENTER}"}

    assert statement_send(statement=hostile_statement).complete
    [message, *_] = smtp_server.to(roles.lead.email)
    _mimetype, attachment = message.attachments()["statement-vision-2026-10.csv"]
    assert attachment == files["api"].content
    _assert_hostile_reasons_neutralised(_assert_safe(attachment.decode(), CSV_COLUMNS))


@pytest.mark.parametrize("value, cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-x", "'-x"), ("@A1", "'@A1"), ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"), ("\n=1", "'\n=1"), ("\0x", "'\0x"), ("  =1+1", "'  =1+1"),
    ("\uff1d1+1", "'\uff1d1+1"), ("\uff20A1", "'\uff20A1"),
    ("-31.25", "-31.25"), ("-5", "-5"), ("0.00", "0.00"), (1728000, "1728000"), (None, ""),
    ("", ""), ("Goodwill = thanks", "Goodwill = thanks"), ("'quoted", "'quoted"),
    ("-1+1", "'-1+1"), ("-1e5", "'-1e5"),
], ids=repr)
def test_a_cell_is_neutralised_unless_it_is_plain_data(value, cell):
    assert csv_cell(value) == cell


def test_the_document_round_trips_quotes_separators_and_line_breaks():
    rows = [['He said "pay"', "a,b;c", "two\r\nlines", "-12.50", 7]]
    text = csv_document(["what", "list", "note", "amount", "seconds"], rows)
    assert text.splitlines()[0] == '"what","list","note","amount","seconds"'
    assert _rows(text)[1] == ['He said "pay"', "a,b;c", "two\r\nlines", "-12.50", "7"]
