"""PDF markup injection: text typed by users and admins (reasons, the team's name and cost
center, the organisation's name) is shown literally in the statement PDF, on the page, in
the mail and in the download: it never breaks the build and never becomes a live link."""

import io
from datetime import UTC, datetime

import pypdf
import pytest
from django.test import Client

from reports.documents import statement_pdf_bytes
from reports.pdf import StatementHeader, statement_pdf
from reports.sending import statement_send
from tests.security.conftest import HOSTILE_COST_CENTER, HOSTILE_TEAM_NAME, MARKUP
from tests.stmtdocs.test_pdf import EXPORT

pytestmark = [pytest.mark.django_db]


def _reader(pdf: bytes) -> pypdf.PdfReader:
    reader = pypdf.PdfReader(io.BytesIO(pdf), strict=True)
    assert reader.pages  # a valid document with pages
    return reader


def _text(pdf: bytes) -> str:
    return " ".join(" ".join(page.extract_text().split()) for page in _reader(pdf).pages)


def _links(pdf: bytes) -> list:
    """Every annotation of every page (a live link is a /Link annotation)."""
    return [annotation.get_object() for page in _reader(pdf).pages
            for annotation in page.get("/Annots") or []]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_hostile_reasons_render_literally_with_no_live_link():
    export = EXPORT | {"lines": [
        {"kind": "adjustment", "gpu_class": None, "seconds": None, "hours": None, "rate": None,
         "amount": "-1.00", "reason": reason} for reason in MARKUP]}
    header = StatementHeader(
        organisation="<font color=red>Evil</font> Institute & Sons",
        team_name=HOSTILE_TEAM_NAME, cost_center=HOSTILE_COST_CENTER,
        generated_at=datetime(2026, 11, 4, 9, 30, tzinfo=UTC), approved_by="admin<br/>",
        approved_at=datetime(2026, 11, 4, 9, 0, tzinfo=UTC))
    pdf = statement_pdf(export=export, header=header, daily=[])
    text = _text(pdf)
    for literal in [*MARKUP, HOSTILE_TEAM_NAME, HOSTILE_COST_CENTER, "admin<br/>",
                    "<font color=red>Evil</font> Institute & Sons"]:
        assert _flat(literal) in text, literal
    assert _links(pdf) == []
    assert b"/URI" not in pdf  # no link action anywhere in the file


def test_the_hostile_statement_downloads_and_mails_as_a_valid_pdf(
        hostile_statement, roles, smtp_server):
    client = Client()
    client.force_login(roles.lead)
    response = client.get("/statements/vision/2026-10.pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    text = _text(response.content)
    for literal in [*MARKUP, HOSTILE_TEAM_NAME, HOSTILE_COST_CENTER]:
        assert _flat(literal) in text, literal
    assert _links(response.content) == []
    assert _links(statement_pdf_bytes(statement=hostile_statement)) == []

    outcome = statement_send(statement=hostile_statement)
    assert outcome.complete, outcome.failed
    [message, *_] = smtp_server.to(roles.lead.email)
    _mimetype, attachment = message.attachments()["statement-vision-2026-10.pdf"]
    assert '<a href="https://evil.example/pay">pay here</a>' in _text(attachment)
    assert _links(attachment) == []
