"""CSV files that a spreadsheet opens as data, never as formulas (CSV or formula injection,
OWASP "CSV Injection"; ASVS 1.2.10). Every CSV the product writes goes through
`csv_document`.

Two rules, as OWASP gives them:
- a cell whose text begins with a character a spreadsheet reads as the start of a formula
  (`=`, `+`, `-`, `@`, their full-width forms, tab, carriage return, line feed, NUL), also
  after leading spaces (some importers trim them), gets a single quote in front, which
  spreadsheets take as "this is text";
- every cell is enclosed in double quotes (an embedded `"` doubled, RFC 4180), so a `;` or
  `,` typed into a reason cannot start a new cell in a spreadsheet that splits on it.

Plain decimal numbers (`-31.25`, `1728000`) are data, not formulas, and are written as they
are: an amount stays a number in finance's spreadsheet. Any CSV parser reads the file back;
a neutralised cell keeps its leading `'`, the price of never running a formula.
"""

import csv
import io
import re
from collections.abc import Iterable, Sequence

FORMULA_STARTS = frozenset("=+-@\t\r\n\0\uff1d\uff0b\uff0d\uff20")
PLAIN_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def csv_cell(value) -> str:
    """`value` as the text of one cell, neutralised if a spreadsheet would evaluate it."""
    text = "" if value is None else str(value)
    if text.lstrip(" ")[:1] in FORMULA_STARTS and not PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_document(columns: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A header row and `rows`, every cell neutralised and quoted, CRLF line ends."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow([csv_cell(column) for column in columns])
    writer.writerows([csv_cell(value) for value in row] for row in rows)
    return out.getvalue()
