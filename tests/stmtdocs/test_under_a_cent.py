"""A line of a few seconds: a borrower's minute that a loan began 1 second before its end is
1 borrowed second at 1.50 per GPU-hour, 0.0004, so 0.00. The line stays (a line is left out
only when its seconds are 0) and the export keeps its figures; the page, the PDF and the
mail show its hours as `< 0.01` and say why it costs 0.00. The total stays the sum of the
line amounts, to the cent."""

import io
from datetime import datetime, timedelta
from decimal import Decimal

import pypdf
import pytest
from django.utils import timezone

from accounts.models import Membership
from gpuquota.core.timeutil import Period
from gpuquota.usage.sweep import dirty_hours_process
from reports.export import statement_export
from reports.models import Statement
from reports.sending import statement_attachments, statement_send
from reports.services_statements import statement_approve, statements_draft_month
from tests.factories import AdminFactory, MembershipFactory, UserFactory, make_gpu
from tests.helpers import browser_login, screenshot
from tests.reports.test_lending_money import World
from tests.stmtdocs.factories import NOW, OCTOBER

pytestmark = [pytest.mark.django_db]
S, M, H = timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1)
NOTE = "less than half a cent: each line is rounded once, to the cent"


def one_second_borrowed(period: Period, *, now: datetime) -> Statement:
    """Speech's month: an hour on demand (3.00) and 1 borrowed second (0.00)."""
    world = World()
    day = period.start + timedelta(days=9)
    world.reserve(day, day + 4 * H)
    world.lend(day + H + 59 * S, day + 2 * H)
    world.busy(day + H, 1, "bob")  # [01:00, 01:01): its last second is borrowed
    lent_gpu, world.gpu = world.gpu, make_gpu(gpu_class=world.gpu_class, index=1,
                                              node=world.gpu.node)
    world.busy(day, 60, "bob")  # on an unreserved GPU: on demand
    world.gpu = lent_gpu
    lead = UserFactory(username="speech-lead", email="speech-lead@example.org")
    MembershipFactory(user=lead, team=world.speech, role=Membership.Role.LEAD)
    while dirty_hours_process():
        pass
    statements_draft_month(period=period, now=now)
    return Statement.objects.get(team=world.speech, month=period.start.date())


def test_the_line_stays_in_the_export_and_reads_as_what_it_is_in_the_mail_and_pdf(
        time_machine, smtp_server):
    time_machine.move_to(NOW, tick=False)
    statement = one_second_borrowed(OCTOBER, now=NOW)
    statement = statement_approve(statement=statement, by=AdminFactory(), now=NOW)
    export = statement_export(statement)
    assert [(line["kind"], line["seconds"], line["hours"], line["rate"], line["amount"])
            for line in export["lines"]] == [("on_demand", 3600, "1.00", "3.00", "3.00"),
                                             ("borrowed", 1, "0.00", "1.50", "0.00")]
    assert export["total"] == "3.00" == str(sum(Decimal(x["amount"]) for x in export["lines"]))

    statement_send(statement=statement, now=NOW)
    [mail] = smtp_server.to("speech-lead@example.org")
    assert f"- Borrowed H100-80GB: < 0.01 h at 1.50 = 0.00 (1 s: {NOTE})" in mail.text()
    assert "- On demand H100-80GB: 1.00 h at 3.00 = 3.00\n" in mail.text().replace("\r", "")
    assert f"1 s: {NOTE}" in mail.html() and "< 0.01" in mail.html().replace("&lt;", "<")
    pdf = statement_attachments(statement=statement, now=NOW)[0].content
    text = " ".join(" ".join(page.extract_text() for page in
                             pypdf.PdfReader(io.BytesIO(pdf)).pages).split())
    assert "< 0.01" in text and NOTE.capitalize().split(":")[0] in text


def _months_ago(n: int) -> Period:
    today = timezone.now()  # the browser's cookies live on the real clock
    index = today.year * 12 + today.month - 1 - n
    return Period.month(index // 12, index % 12 + 1)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_statement_page_says_why_a_line_costs_nothing(browser_page):
    month = _months_ago(2)
    statement = one_second_borrowed(month, now=timezone.now())
    admin = AdminFactory(username="admin")
    admin.set_password("password")
    admin.save()
    page = browser_page
    browser_login(page, "admin")
    page.goto(f"/statements/speech/{statement.period_label}/")
    cells = page.locator("#lines tr.line-borrowed td").all_inner_texts()
    assert cells[0] == f"Borrowed\n{NOTE.capitalize()}"
    assert cells[1:] == ["H100-80GB", "1", "< 0.01", "1.50", "0.00"]
    assert page.locator("#lines tr.line-on_demand td").all_inner_texts()[1:] == [
        "H100-80GB", "3,600", "1.00", "3.00", "3.00"]
    assert page.inner_text("#total") == "3.00 USD"
    screenshot(page, "statements-line-under-a-cent")
