"""Statement pages against every role, the review page's flags, approval, adjustments and
bad months. Real drafts: usage is rolled up and priced through the public services."""

from datetime import timedelta

import pytest
from django.urls import reverse

from reports.models import Adjustment, Statement
from tests.factories import GpuClassFactory, TeamFactory, make_gpu
from tests.helpers import csv_lines
from tests.stmtdocs.factories import (
    NOVEMBER,
    NOW,
    OCTOBER,
    SEPTEMBER,
    draft,
    priced_gpus,
    reserved_hours,
)

pytestmark = [pytest.mark.django_db]
ROLES = ["admin", "lead", "other_lead", "member", "outsider", "anonymous"]
SEES_TEAM = {"admin", "lead", "member"}


@pytest.fixture(autouse=True)
def _clock(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.fixture
def month(roles):
    """Vision: 2 h in September, 3 h in October, all reported (+50%). Speech: 4 h in
    October of which 1 h reported (coverage 25%). Robotics: an L4 without a rate card."""
    vision_gpu, speech_gpu = priced_gpus(2)
    reserved_hours(
        roles.team, vision_gpu, SEPTEMBER.start + timedelta(days=3), 2, reported_minutes=120
    )
    reserved_hours(
        roles.team, vision_gpu, OCTOBER.start + timedelta(days=3), 3, reported_minutes=180
    )
    reserved_hours(
        roles.other_team, speech_gpu, OCTOBER.start + timedelta(days=4), 4, reported_minutes=60
    )
    robotics = TeamFactory(name="Robotics", slug="robotics")
    l4 = make_gpu(gpu_class=GpuClassFactory(name="L4"))
    reserved_hours(robotics, l4, OCTOBER.start + timedelta(days=5), 1, reported_minutes=0)
    draft(SEPTEMBER, OCTOBER)
    return roles


def login(client, roles, role):
    if role != "anonymous":
        client.force_login(getattr(roles, role))


def detail_url(slug="vision", month="2026-10", name="statement_detail"):
    return reverse(name, args=[slug, month])


def approve_all(month: str, **changes) -> dict:
    """What the review page's "Approve all" posts once confirmed: the month and each
    approvable draft with the total shown (`changes`: slug → another total)."""
    drafts = Statement.objects.filter(month=f"{month}-01", status="draft", error="")
    return {"month": month, "confirm": [f"{s.pk}:{changes.get(s.team_slug, s.total)}"
                                        for s in drafts]}


@pytest.mark.parametrize("role", ROLES)
def test_review_page_is_for_admins_only(client, month, role):
    login(client, month, role)
    response = client.get(reverse("statement_review") + "?month=2026-10")
    expected = {"admin": 200, "anonymous": 302}.get(role, 404)
    assert response.status_code == expected


def test_review_page_shows_every_team_beside_last_month_with_flags(
    client, month, django_assert_max_num_queries
):
    client.force_login(month.admin)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("statement_review") + "?month=2026-10")
    body = response.content.decode()
    review = response.context["review"]
    rows = {row.slug: row for row in review.rows}
    assert set(rows) == {"vision", "speech", "robotics"}
    vision, speech, robotics = rows["vision"], rows["speech"], rows["robotics"]
    assert vision.statement.total == 7.5 and vision.previous.total == 5
    assert vision.flags == ["change over 25%"]
    assert speech.flags == ["coverage under 90%"]
    assert robotics.flags[0].startswith("failed:") and "L4" in robotics.flags[0]
    assert [row.slug for row in review.approvable] == ["speech", "vision"]
    assert "Approve all 2 drafts" in body and "+50.0%" in body and "25.0%" in body


def test_review_page_queries_do_not_grow_with_the_number_of_teams(client, month):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(month.admin)
    client.post(detail_url(month="2026-09", name="statement_approve"))  # late usage is read
    url = reverse("statement_review") + "?month=2026-10"
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    for n in range(5):
        team = TeamFactory(name=f"Extra {n}", slug=f"extra-{n}")
        for period, status in ((SEPTEMBER, "approved"), (OCTOBER, "draft")):
            Statement.objects.create(
                team=team,
                month=period.start.date(),
                status=status,
                currency="USD",
                team_name=team.name,
                team_slug=team.slug,
                computed_at=NOW,
                computed_until=period.end,
                approved_at=NOW if status == "approved" else None,
            )
    with CaptureQueriesContext(connection) as many:
        response = client.get(url)
    assert len(response.context["review"].rows) == 8
    assert len(many.captured_queries) == len(few.captured_queries)


def test_review_page_month_picker_and_bad_months(client, month):
    client.force_login(month.admin)
    response = client.get(reverse("statement_review"))
    assert response.context["month_text"] == "2026-10"  # last month by default
    for bad in ("2026-13", "abc", "2027-01", "2026-1-1"):
        response = client.get(reverse("statement_review") + f"?month={bad}")
        assert response.status_code == 400, bad
        assert "Cannot show" in response.content.decode()
        assert response.context["review"] is None


def test_approval_before_the_settlement_delay_is_refused_with_the_date(client, month):
    client.force_login(month.admin)
    draft(NOVEMBER)
    response = client.get(reverse("statement_review") + "?month=2026-11")
    assert "Approval for November 2026 opens on 2026-12-04 00:00 (" in response.content.decode()
    response = client.post(reverse("statements_approve_all"),
                           {"month": "2026-11", "confirm": "1:0.00"}, follow=True)
    assert "can be approved from 2026-12-04 00:00Z" in response.content.decode()
    assert not Statement.objects.filter(month=NOVEMBER.start.date()).exclude(status="draft")


def test_approve_all_approves_every_complete_draft_and_names_the_failed_one(
    client, month, django_capture_on_commit_callbacks
):
    client.force_login(month.admin)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(reverse("statements_approve_all"), approve_all("2026-10"),
                               follow=True)
    body = response.content.decode()
    assert "2 statements of 2026-10 approved" in body
    assert "Robotics not approved" in body and "L4" in body
    statuses = dict(
        Statement.objects.filter(month=OCTOBER.start.date()).values_list("team_slug", "status")
    )
    assert statuses == {"vision": "approved", "speech": "approved", "robotics": "draft"}
    assert len(callbacks) == 2  # one send per approved statement, after commit


def test_approve_all_is_confirmed_with_the_count_and_the_total(client, month):
    """Approval is final and mails every lead: the page asks first, naming how many and
    how much, and approves exactly what the admin confirmed."""
    client.force_login(month.admin)
    body = client.get(reverse("statement_review") + "?month=2026-10").content.decode()
    assert "Approve all 2 drafts…" in body
    assert "Approve <strong>2 statements</strong> of October 2026, totalling <strong>" in body
    vision, speech = (Statement.objects.get(month=OCTOBER.start.date(), team_slug=slug)
                      for slug in ("vision", "speech"))
    assert f"{vision.total + speech.total} USD</strong>?" in body
    assert f'value="{vision.pk}:{vision.total}"' in body
    # no confirmation: nothing approved
    response = client.post(reverse("statements_approve_all"), {"month": "2026-10"},
                           follow=True)
    assert "Nothing was confirmed" in response.content.decode()
    assert not Statement.objects.exclude(status="draft").exists()
    # a total that is not the one shown any more (recomputed meanwhile): that one waits
    response = client.post(reverse("statements_approve_all"),
                           approve_all("2026-10", speech="0.01"), follow=True)
    body = response.content.decode()
    assert "1 statements of 2026-10 approved" in body
    assert "Speech not approved: its total is now" in body and "not the 0.01 confirmed" in body
    statuses = dict(Statement.objects.filter(month=OCTOBER.start.date())
                    .values_list("team_slug", "status"))
    assert statuses == {"vision": "approved", "speech": "draft", "robotics": "draft"}
    bad = client.post(reverse("statements_approve_all"), {"month": "2026-10",
                                                          "confirm": "x:y"}, follow=True)
    assert "Not a confirmation" in bad.content.decode()


@pytest.mark.parametrize("role", ROLES)
def test_statement_page_and_downloads_by_role(client, month, role):
    login(client, month, role)
    urls = [detail_url(), detail_url(name="statement_csv"), detail_url(name="statement_pdf")]
    for url in urls:
        response = client.get(url)
        if role == "anonymous":
            assert response.status_code == 302
        else:
            assert response.status_code == (200 if role in SEES_TEAM else 404), url
    if role in SEES_TEAM:
        body = client.get(urls[0]).content.decode()
        assert "7.50 USD" in body and "H100-80GB" in body and "10,800" in body
        assert ("Add an adjustment" in body) == (role == "admin")
        assert ('id="approve"' in body) == (role == "admin")
        csv = client.get(urls[1])
        assert csv["Content-Disposition"] == 'attachment; filename="statement-vision-2026-10.csv"'
        [row] = csv_lines(csv.content.decode())[1:]
        assert row.startswith("vision,2026-10,USD,reserved,H100-80GB,10800,3.00,2.50,7.50,,")
        assert row.split(",")[11:13] == ["draft", ""]  # status, approved_at; energy follows
        pdf = client.get(urls[2])
        assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")


def test_statement_page_bad_months_are_404(client, month):
    client.force_login(month.admin)
    for bad in ("2026-13", "abc", "2027-01", "0-0", "1990-01"):
        assert client.get(detail_url(month=bad)).status_code == 404, bad
        assert client.get(detail_url(month=bad, name="statement_pdf")).status_code == 404, bad


def test_a_failed_draft_shows_its_reason_and_has_no_downloads(client, month):
    client.force_login(month.admin)
    body = client.get(detail_url("robotics")).content.decode()
    assert "This draft failed" in body and "L4" in body
    assert 'id="download-pdf"' not in body and 'id="approve"' not in body
    assert client.get(detail_url("robotics", name="statement_csv")).status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_admin_actions_are_refused_to_everyone_else(client, month, role):
    login(client, month, role)
    posts = [
        (detail_url(name="statement_approve"), {}),
        (detail_url(name="statement_adjust"), {"amount": "-1.00", "reason": "x"}),
        (reverse("statements_approve_all"), approve_all("2026-10")),
        (reverse("statements_draft_all"), {"month": "2026-10"}),
    ]
    for url, data in posts:
        response = client.post(url, data)
        if role == "admin":
            assert response.status_code == 302, url
        else:
            assert response.status_code == (302 if role == "anonymous" else 404), url
            assert response.status_code != 302 or "/login" in response["Location"]
    approved = Statement.objects.filter(team_slug="vision", status="approved").exists()
    assert approved == (role == "admin")


def test_an_adjustment_becomes_a_line_and_bad_input_is_the_form_message(client, month):
    client.force_login(month.admin)
    url = detail_url(name="statement_adjust")
    response = client.post(url, {"amount": "-2.25", "reason": "Scheduler outage"}, follow=True)
    assert "Adjustment added." in response.content.decode()
    statement = Statement.objects.get(team_slug="vision", month=OCTOBER.start.date())
    assert statement.total == 5.25
    assert statement.lines.filter(kind="adjustment", reason="Scheduler outage").exists()
    for data, message in [
        ({"amount": "0", "reason": "nothing"}, "changes nothing"),
        ({"amount": "1.234", "reason": "cents"}, "2 decimal places"),
        ({"amount": "abc", "reason": "x"}, "Enter a number"),
        ({"amount": "5", "reason": ""}, "This field is required"),
    ]:
        response = client.post(url, data)
        assert response.status_code == 400 and message in response.content.decode(), data
    client.post(detail_url(name="statement_approve"))
    response = client.post(url, {"amount": "1.00", "reason": "late"}, follow=True)
    assert "is approved: add the correction to an open month" in response.content.decode()
    assert Adjustment.objects.count() == 1


@pytest.mark.parametrize("role", ROLES)
def test_team_page_lists_the_statements_with_downloads(client, month, role):
    login(client, month, role)
    response = client.get(reverse("team_detail", args=["vision"]))
    if role not in SEES_TEAM:
        assert response.status_code in (302, 404)
        return
    body = response.content.decode()
    section = body.split('id="team-statements"')[1].split("</table>")[0]
    assert "October 2026" in section and "September 2026" in section
    assert "7.50" in section and "5.00" in section
    assert detail_url(name="statement_pdf") in section
    assert detail_url(name="statement_csv", month="2026-09") in section


def test_late_usage_is_flagged_shown_line_by_line_and_settled_in_one_click(client, month):
    client.force_login(month.admin)
    client.post(detail_url(name="statement_approve"))
    gpu = (
        Statement.objects.get(team_slug="vision", month=OCTOBER.start.date()).lines.get().gpu_class
    )
    late_gpu = make_gpu(gpu_class=gpu)
    reserved_hours(month.team, late_gpu, OCTOBER.start + timedelta(days=9), 1, reported_minutes=0)
    draft(NOVEMBER)

    response = client.get(reverse("statement_review") + "?month=2026-11")
    [vision] = [row for row in response.context["review"].rows if row.slug == "vision"]
    assert "late usage" in vision.flags and vision.late_usage.difference == 2.5
    page = client.get(detail_url(month="2026-11")).content.decode()
    assert "Late usage of October 2026" in page and 'id="late-adjust"' in page
    approved_page = client.get(detail_url()).content.decode()
    late_table = approved_page.split('id="late-lines"')[1].split("</table>")[0]
    assert "3.00" in late_table and "4.00" in late_table and "2.50" in late_table

    member = client.__class__()
    member.force_login(month.member)
    assert 'id="late-adjust"' not in member.get(detail_url(month="2026-11")).content.decode()
    assert member.post(detail_url(name="statement_late_adjust")).status_code == 404

    response = client.post(detail_url(name="statement_late_adjust"), follow=True)
    assert "Adjustment of 2.50 added to 2026-11." in response.content.decode()
    november = Statement.objects.get(team_slug="vision", month=NOVEMBER.start.date())
    assert november.lines.filter(kind="adjustment", amount=2.5).exists()
    page = client.get(detail_url(month="2026-11")).content.decode()
    assert "Already settled by adjustments" in page and 'id="late-adjust"' not in page
    assert '<td class="num" id="late-difference">0.00</td>' in page
    response = client.post(detail_url(name="statement_late_adjust"), follow=True)
    assert "Nothing late to settle for 2026-10." in response.content.decode()


def test_the_statement_page_groups_seconds_and_breaks_the_month_down_by_reservation(
        client, month):
    """Seconds read as the PDF prints them (10,800, not 10800), and each reservation of the
    month says where the reserved hours come from."""
    client.force_login(month.lead)
    body = client.get(detail_url()).content.decode()
    assert '<td class="num">10,800</td>' in body and ">10800<" not in body
    [reservation] = month.team.reservations.filter(start__gte=OCTOBER.start,
                                                   start__lt=OCTOBER.end)
    assert 'id="by-reservation"' in body
    row = body.split(f'id="reservation-{reservation.id}"')[1].split("</tr>")[0]
    assert f"#{reservation.id} × 1" in row and "H100-80GB" in row
    assert '<td class="num">3.00</td>' in row  # reserved hours in October
    assert "100.0%" in row  # all of it reported busy
    september = month.team.reservations.get(start__lt=OCTOBER.start)
    assert f'id="reservation-{september.id}"' not in body  # another month's
    speech = client.get(detail_url("speech")).status_code
    assert speech == 404  # the lead of Vision does not see Speech's


def test_review_page_has_currencies_a_total_row_and_the_months_csv(client, month):
    client.force_login(month.admin)
    body = client.get(reverse("statement_review") + "?month=2026-10").content.decode()
    # every amount says its currency, the previous month's too
    assert '<a href="/statements/vision/2026-09/">5.00</a> <span class="muted small">USD' in body
    review = client.get(reverse("statement_review") + "?month=2026-10").context["review"]
    [totals] = review.column_totals
    # Vision 7.50 and Speech 10.00 (Robotics' draft failed); September: Vision's 5.00
    assert (totals["currency"], totals["total"], totals["previous"]) == ("USD", 17.5, 5)
    assert 'id="review-total-USD"' in body and "17.50" in body
    assert 'href="/api/v1/statements/2026-10.csv"' in body
    csv = client.get("/api/v1/statements/2026-10.csv")
    assert csv.status_code == 200 and "vision" in csv.content.decode()


def test_the_month_in_progress_is_not_compared_with_a_whole_month(client, month):
    """November is to date: its draft is not flagged for a change against all of October,
    and a team not drafted yet is "not drafted yet", not "nothing to bill"."""
    reserved_hours(month.team, _gpu_of(month.team), NOVEMBER.start + timedelta(days=1), 30,
                   reported_minutes=60)
    draft(NOVEMBER)
    client.force_login(month.admin)
    response = client.get(reverse("statement_review") + "?month=2026-11")
    rows = {row.slug: row for row in response.context["review"].rows}
    vision = rows["vision"]
    assert vision.statement.total > vision.previous.total * 2  # 30 h against October's 3 h
    assert vision.change is None and "change over 25%" not in vision.flags
    assert response.context["review"].in_progress
    Statement.objects.filter(team=month.other_team, month=NOVEMBER.start.date()).delete()
    body = client.get(reverse("statement_review") + "?month=2026-11").content.decode()
    assert "not drafted yet" in body and "nothing to bill" not in body


def _gpu_of(team):
    from gpuquota.reservations.models import Assignment

    return Assignment.objects.filter(reservation__team=team).first().gpu


def test_statement_lines_say_the_rates_unit_and_how_each_kind_is_priced(client, month):
    client.force_login(month.admin)
    body = client.get(detail_url()).content.decode()
    assert 'Rate <span class="unit">USD/GPU-h</span>' in body
    assert 'Amount <span class="unit">USD</span>' in body
    assert "every reserved second × the reserved rate." in body
