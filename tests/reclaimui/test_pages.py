"""The reclaim pages and their forms against every role, bad input in every form
(a message, never a 500), and bounded queries on the review page."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Assignment
from reclaim import lifecycle
from reclaim.models import Exemption, Recommendation
from tests.reclaimui.factories import ALTERNATING, reclaim_fleet, reservation_with_telemetry

pytestmark = pytest.mark.django_db
NOT_ADMINS = ["lead", "other_lead", "member", "outsider"]
EVERYONE = ["admin", *NOT_ADMINS]


def login(client, roles, role):
    if role != "anonymous":
        client.force_login(getattr(roles, role))


def body_of(response) -> str:
    return response.content.decode()


def messages_of(response) -> str:
    return " ".join(str(m) for m in response.context["messages"]) if response.context else ""


def as_each(client, roles, role_names):
    """Sign in as each role in turn."""
    for role in role_names:
        client.logout()
        login(client, roles, role)
        yield role


@pytest.fixture
def fleet(roles):
    return reclaim_fleet(roles)


@pytest.fixture
def vision_rec(fleet):
    return fleet.recommendation(fleet.reservations[0])


def accepted(rec, roles) -> Recommendation:
    return lifecycle.recommendation_accept(recommendation=rec, actor=roles.admin)


def objected(rec, roles) -> Recommendation:
    accepted(rec, roles)
    return lifecycle.recommendation_object(recommendation=rec, actor=roles.lead,
                                           reason="eval job tonight")


# --- the review page --------------------------------------------------------------

def test_review_page_lists_open_recommendations_over_quota_first(client, roles, fleet):
    client.force_login(roles.admin)
    response = client.get(reverse("reclaim_review"))
    assert response.status_code == 200
    body = body_of(response)
    speech = fleet.recommendation(fleet.reservations[1])
    vision = fleet.recommendation(fleet.reservations[0])
    assert body.index(f'id="rec-{speech.pk}"') < body.index(f'id="rec-{vision.pk}"')
    card = body[body.index(f'id="rec-{vision.pk}"'):]
    card = card[:card.index("</section>")]
    assert "Give back 1 idle GPU" in card and "over quota" not in card
    assert 'class="chart strips"' in card and "vision-node/0" in card and "vision-node/1" in card
    assert "0.0%" in card and "80.0%" in card and "30.0 GiB" in card and "alice" in card
    assert f"{vision.savings} USD" in card
    assert 'id="backtest"' in body and 'id="exemptions"' in body and "Policy in force" in body


def test_review_page_is_for_admins_only(client, roles, fleet):
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.get(reverse("reclaim_review")).status_code == 404, role


def test_pages_need_sign_in(client, roles, vision_rec):
    for url in (reverse("reclaim_review"), reverse("reclaim_detail", args=[vision_rec.pk])):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_nav_link_for_admins_only(client, roles, fleet):
    client.force_login(roles.admin)
    assert 'href="/reclaim/"' in body_of(client.get(reverse("fleet")))
    client.force_login(roles.lead)
    assert 'href="/reclaim/"' not in body_of(client.get(reverse("fleet")))


def test_detail_page_with_audit_for_admins_and_the_team(client, roles, vision_rec):
    accepted(vision_rec, roles)
    url = reverse("reclaim_detail", args=[vision_rec.pk])
    for role in as_each(client, roles, ["admin", "lead", "member"]):
        response = client.get(url)
        assert response.status_code == 200, role
        body = body_of(response)
        assert "reclaim.recommend" in body and "reclaim.accept" in body
        assert "by admin" in body and "the system" in body
        assert (reverse("reclaim_uphold", args=[vision_rec.pk]) in body) is False
    for role in as_each(client, roles, ["other_lead", "outsider"]):
        assert client.get(url).status_code == 404, role


def more_recommendations(roles, fleet, n: int) -> None:
    """n more idle Speech reservations, evaluated; the first two accepted, one objected."""
    from gpuquota.usage.services import dirty_hours_process
    from reclaim.services import recommendations_evaluate

    added = [reservation_with_telemetry(roles.other_team, utils=[0, 0], now=fleet.now)
             for _ in range(n)]
    dirty_hours_process()
    recommendations_evaluate(now=fleet.now)
    fleet.reservations += added
    for reservation in added[:2]:
        lifecycle.recommendation_accept(recommendation=fleet.recommendation(reservation),
                                        actor=roles.admin)
    lifecycle.recommendation_object(recommendation=fleet.recommendation(added[0]),
                                    actor=roles.other_lead, reason="needed")


def queries_of(client, url: str) -> tuple[int, str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured), body_of(response)


def test_review_and_team_pages_run_bounded_queries(client, roles, fleet):
    client.force_login(roles.admin)
    review, team = reverse("reclaim_review"), reverse("team_detail", args=["speech"])
    small_review, _ = queries_of(client, review)
    small_team, _ = queries_of(client, team)
    more_recommendations(roles, fleet, 4)
    large_review, body = queries_of(client, review)
    assert body.count('<section class="rec') == len(fleet.reservations)
    large_team, body = queries_of(client, team)
    assert body.count('class="banner"') == 2 and 'id="reclaim-idle"' in body
    assert large_review == small_review <= 16
    assert large_team == small_team


# --- admin actions: roles (the refused roles first: they change nothing) -------------

@pytest.mark.parametrize("name, data, outcome", [
    ("reclaim_accept", {}, "accepted"),
    ("reclaim_dismiss", {"reason": "benchmark tonight", "snooze_days": "1"}, "dismissed"),
])
def test_accept_and_dismiss_are_for_admins(client, roles, vision_rec, name, data, outcome):
    url = reverse(name, args=[vision_rec.pk])
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.post(url, data).status_code == 404, role
        vision_rec.refresh_from_db()
        assert vision_rec.status == "open", role
    client.force_login(roles.admin)
    assert client.post(url, data).status_code == 302
    vision_rec.refresh_from_db()
    assert vision_rec.status == outcome


def test_bulk_accept_is_for_admins(client, roles, fleet):
    ids = [r.pk for r in Recommendation.objects.filter(status="open")]
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.post(reverse("reclaim_accept_bulk"), {"ids": ids}).status_code == 404
        assert not Recommendation.objects.filter(status="accepted").exists(), role
    client.force_login(roles.admin)
    response = client.post(reverse("reclaim_accept_bulk"), {"ids": ids}, follow=True)
    statuses = set(Recommendation.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {"accepted"}
    assert "Accepted: " + ", ".join(f"#{i}" for i in ids) in body_of(response)


@pytest.mark.parametrize("action, outcome", [("reclaim_uphold", "accepted"),
                                             ("reclaim_withdraw", "dismissed")])
def test_objection_decisions_are_for_admins(client, roles, vision_rec, action, outcome):
    objected(vision_rec, roles)
    url = reverse(action, args=[vision_rec.pk])
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.post(url, {"reason": "agreed"}).status_code == 404, role
        vision_rec.refresh_from_db()
        assert vision_rec.status == "objected"
    client.force_login(roles.admin)
    assert client.post(url, {"reason": "agreed"}).status_code == 302
    vision_rec.refresh_from_db()
    assert vision_rec.status == outcome and vision_rec.objection_decision_reason == "agreed"


def test_exemptions_are_managed_by_admins(client, roles, fleet):
    until = (timezone.localtime() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    data = {"reservation": fleet.reservations[0].pk, "reason": "benchmark", "until": until}
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.post(reverse("reclaim_exemption_create"), data).status_code == 404, role
        assert not Exemption.objects.exists()
    client.force_login(roles.admin)
    assert client.post(reverse("reclaim_exemption_create"), data).status_code == 302
    exemption = Exemption.objects.get(reservation=fleet.reservations[0])
    body = body_of(client.get(reverse("reclaim_review")))
    assert f'id="exemption-{exemption.pk}"' in body and "benchmark" in body
    end = reverse("reclaim_exemption_end", args=[exemption.pk])
    for role in as_each(client, roles, NOT_ADMINS):
        assert client.post(end).status_code == 404, role
        exemption.refresh_from_db()
        assert exemption.until > timezone.now()
    client.force_login(roles.admin)
    assert client.post(end).status_code == 302
    exemption.refresh_from_db()
    assert exemption.until <= timezone.now()
    response = client.post(end, follow=True)
    assert "already ended" in messages_of(response)


def test_exempt_reservations_are_listed_apart_without_actions(client, roles, fleet):
    reservation = fleet.reservations[0]
    Exemption.objects.create(reservation=reservation, reason="interactive, agreed",
                             created_by=roles.admin, until=fleet.now + timedelta(days=1),
                             created_at=fleet.now)
    from reclaim.services import recommendations_evaluate

    recommendations_evaluate(now=fleet.now + timedelta(seconds=1))
    client.force_login(roles.admin)
    body = body_of(client.get(reverse("reclaim_review")))
    rec = fleet.recommendation(reservation)
    exempt = body[body.index('id="exempt"'):body.index('id="recent"')]
    assert f'id="rec-{rec.pk}"' in exempt and "exempt until" in exempt
    assert reverse("reclaim_accept", args=[rec.pk]) not in body


# --- team actions: roles ------------------------------------------------------------

REFUSED_FOR_TEAM = [("member", 403), ("other_lead", 404), ("outsider", 404)]


@pytest.mark.parametrize("role", ["lead", "admin"])
def test_object_is_for_the_teams_leads(client, roles, vision_rec, role):
    accepted(vision_rec, roles)
    url = reverse("reclaim_object", args=[vision_rec.pk])
    for refused, status in REFUSED_FOR_TEAM:
        client.logout()
        login(client, roles, refused)
        assert client.post(url, {"reason": "eval tonight"}).status_code == status, refused
        vision_rec.refresh_from_db()
        assert vision_rec.status == "accepted"
    login(client, roles, role)
    assert client.post(url, {"reason": "eval tonight"}).status_code == 302
    vision_rec.refresh_from_db()
    assert vision_rec.status == "objected" and vision_rec.objection_by == getattr(roles, role)


@pytest.mark.parametrize("role", ["lead", "admin"])
def test_release_idle_is_for_the_teams_leads(client, roles, fleet, role):
    reservation = fleet.reservations[0]
    url = reverse("reclaim_release_idle", args=[reservation.pk])

    def running():
        return Assignment.objects.filter(reservation=reservation,
                                         assigned_until__gt=timezone.now()).count()

    for refused, status in REFUSED_FOR_TEAM:
        client.logout()
        login(client, roles, refused)
        assert client.post(url).status_code == status, refused
        assert running() == 2
    login(client, roles, role)
    assert client.post(url).status_code == 302
    assert running() == 1


def test_team_banner_after_accept(client, roles, vision_rec):
    rec = accepted(vision_rec, roles)
    for role in as_each(client, roles, ["admin", "lead", "member"]):
        team_banner_check(client, rec, role)
    for role in as_each(client, roles, ["other_lead", "outsider"]):
        assert client.get(reverse("team_detail", args=["vision"])).status_code == 404, role


def team_banner_check(client, rec, role):
    body = body_of(client.get(reverse("team_detail", args=["vision"])))
    banner = body[body.index(f'id="reclaim-notice-{rec.pk}"'):]
    banner = banner[:banner.index("<h2>Quota</h2>")]
    assert "1 idle GPU of reservation" in banner and "vision-node/0" in banner
    assert "vision-node/0 was busy 0.0% of the time" in banner and "vision-node/1" not in banner
    assert timezone.localtime(rec.grace_until).strftime("%Y-%m-%d %H:%M") in banner
    assert (reverse("reclaim_object", args=[rec.pk]) in body) == (role != "member")
    assert 'id="reclaim-audit"' in body and "reclaim.accept" in body


def test_team_page_offers_idle_gpus_to_leads(client, roles, fleet):
    client.force_login(roles.lead)
    body = body_of(client.get(reverse("team_detail", args=["vision"])))
    reservation = fleet.reservations[0]
    assert f'id="reclaim-idle-{reservation.pk}"' in body
    assert reverse("reclaim_release_idle", args=[reservation.pk]) in body
    assert reverse("reclaim_release_idle", args=[fleet.reservations[1].pk]) not in body
    client.force_login(roles.member)
    body = body_of(client.get(reverse("team_detail", args=["vision"])))
    assert f'id="reclaim-idle-{reservation.pk}"' in body
    assert reverse("reclaim_release_idle", args=[reservation.pk]) not in body


def test_team_audit_shows_only_the_teams_entries(client, roles, fleet):
    speech = fleet.recommendation(fleet.reservations[1])
    accepted(speech, roles)
    client.force_login(roles.lead)
    body = body_of(client.get(reverse("team_detail", args=["vision"])))
    assert f"#{speech.pk}</a> reclaim.accept" not in body
    assert AuditEntry.objects.filter(action="reclaim.accept", team=roles.other_team).exists()


# --- bad input: a message, never a 500 ----------------------------------------------

DISMISS_BAD = [
    ({}, "Give a reason for dismissing."),
    ({"reason": "  "}, "Give a reason for dismissing."),
    ({"reason": "x", "snooze_days": "-1"}, "greater than or equal to 0"),
    ({"reason": "x", "snooze_days": "400"}, "less than or equal to 366"),
    ({"reason": "x", "snooze_days": "soon"}, "Enter a number."),
    ({"reason": "x" * 2001}, "at most 2000 characters"),
]


def test_dismiss_bad_input(client, roles, vision_rec):
    client.force_login(roles.admin)
    for data, message in DISMISS_BAD:
        response = client.post(reverse("reclaim_dismiss", args=[vision_rec.pk]), data,
                               follow=True)
        assert response.status_code == 200 and message in messages_of(response), data
        vision_rec.refresh_from_db()
        assert vision_rec.status == "open"


def test_actions_in_the_wrong_state_say_why(client, roles, vision_rec):
    client.force_login(roles.admin)
    accepted(vision_rec, roles)
    for name, data, text in [
        ("reclaim_accept", {}, "Only open recommendations can be accepted"),
        ("reclaim_dismiss", {"reason": "x"}, "Only open recommendations can be dismissed"),
        ("reclaim_uphold", {}, "Only an objected recommendation can be upheld"),
        ("reclaim_withdraw", {}, "Only an objected recommendation can be withdrawn"),
    ]:
        response = client.post(reverse(name, args=[vision_rec.pk]), data, follow=True)
        assert response.status_code == 200 and text in messages_of(response), name
    assert client.post(reverse("reclaim_accept", args=[999999])).status_code == 404


def test_next_only_goes_back_to_this_site(client, roles, vision_rec):
    client.force_login(roles.admin)
    detail = reverse("reclaim_detail", args=[vision_rec.pk])
    response = client.post(reverse("reclaim_dismiss", args=[vision_rec.pk]),
                           {"reason": "x", "next": "https://evil.example/"})
    assert response["Location"] == reverse("reclaim_review")
    response = client.post(reverse("reclaim_accept", args=[vision_rec.pk]), {"next": detail})
    assert response["Location"] == detail


def test_bulk_accept_bad_input(client, roles, fleet):
    client.force_login(roles.admin)
    for data, message in [({}, "Tick at least one recommendation"),
                          ({"ids": "abc"}, "Recommendation abc is not open any more"),
                          ({"ids": "999999"}, "is not open any more")]:
        response = client.post(reverse("reclaim_accept_bulk"), data, follow=True)
        assert response.status_code == 200 and message in messages_of(response), data
        assert not Recommendation.objects.filter(status="accepted").exists()


def test_object_bad_input(client, roles, vision_rec):
    client.force_login(roles.lead)
    url = reverse("reclaim_object", args=[vision_rec.pk])
    response = client.post(url, {"reason": "too early"}, follow=True)
    assert "Only an accepted recommendation can be objected to" in messages_of(response)
    rec = accepted(vision_rec, roles)
    response = client.post(url, {"reason": " "}, follow=True)
    assert "Say why the GPUs are still needed." in messages_of(response)
    response = client.post(url, {"reason": "x" * 2001}, follow=True)
    assert "at most 2000 characters" in messages_of(response)
    Recommendation.objects.filter(pk=rec.pk).update(grace_until=timezone.now()
                                                    - timedelta(minutes=1))
    response = client.post(url, {"reason": "late"}, follow=True)
    assert response.status_code == 200 and "The grace period has ended" in messages_of(response)
    rec.refresh_from_db()
    assert rec.status == "accepted"


def test_release_idle_without_idle_gpus_says_so(client, roles, fleet):
    client.force_login(roles.lead)
    reservation = fleet.reservations[0]
    client.post(reverse("reclaim_release_idle", args=[reservation.pk]))
    response = client.post(reverse("reclaim_release_idle", args=[reservation.pk]), follow=True)
    assert response.status_code == 200
    assert "No idle GPUs are recommended" in messages_of(response)
    assert client.post(reverse("reclaim_release_idle", args=[999999])).status_code == 404


def _until(delta: timedelta) -> str:
    return (timezone.localtime() + delta).strftime("%Y-%m-%dT%H:%M")


EXEMPTION_BAD = [
    ({"reason": "x", "until": "+3d"}, "Name a reservation, or both a team and a GPU class."),
    ({"reservation": "999999", "reason": "x", "until": "+3d"}, "There is no reservation #999999"),
    ({"reservation": "R", "reason": "x", "until": "+3d"}, "Enter a whole number."),
    ({"reservation": "first", "reason": "", "until": "+3d"}, "Say why it must not be reclaimed."),
    ({"reservation": "first", "reason": "x", "until": "-1d"}, "The end must be in the future."),
    ({"reservation": "first", "reason": "x", "until": "tomorrow"}, "Enter a date and time"),
    ({"reservation": "first", "reason": "x", "until": ""}, "This field is required."),
    ({"team": "999999", "reason": "x", "until": "+3d"}, "Select a valid choice."),
    ({"reservation": "first", "team": "vision", "reason": "x", "until": "+3d"},
     "Exempt a reservation, or a team and class, not both."),
]


def test_exemption_bad_input(client, roles, fleet):
    client.force_login(roles.admin)
    for bad, message in EXEMPTION_BAD:
        data = dict(bad)
        if data.get("reservation") == "first":
            data["reservation"] = fleet.reservations[0].pk
        if data.get("team") == "vision":
            data["team"] = roles.team.pk
        if data["until"] in ("+3d", "-1d"):
            data["until"] = _until(timedelta(days=3 if data["until"] == "+3d" else -1))
        response = client.post(reverse("reclaim_exemption_create"), data)
        assert response.status_code == 400, bad
        body = body_of(response)
        assert message in body and "The exemption was not recorded" in body, bad
        assert 'id="exemption-form"' in body
        assert not Exemption.objects.exists()


def test_exemption_for_a_team_and_class(client, roles, fleet):
    klass = fleet.reservations[0].gpu_class
    client.force_login(roles.admin)
    response = client.post(reverse("reclaim_exemption_create"), {
        "team": roles.team.pk, "gpu_class": klass.pk, "reason": "interactive",
        "until": _until(timedelta(days=2))}, follow=True)
    assert "recorded" in messages_of(response)
    assert Exemption.objects.get().team == roles.team


BACKTEST_BAD = [
    ("days=0", "greater than or equal to 1"),
    ("days=abc", "Enter a whole number."),
    ("days=7&idle_busy_fraction=2", "less than or equal to 1"),
    ("days=7&min_coverage=-0.5", "greater than or equal to 0"),
    ("days=7&lookback_hours=0", "greater than or equal to 1"),
    ("days=7&idle_busy_fraction=0.1.2", "Enter a number."),
]


def test_backtest_bad_input_is_shown_on_the_form(client, roles, fleet):
    client.force_login(roles.admin)
    for query, message in BACKTEST_BAD:
        response = client.get(reverse("reclaim_review") + "?" + query)
        assert response.status_code == 200, query
        body = body_of(response)
        assert message in body and 'id="backtest-result"' not in body, query


def backtest_stat(body: str, name: str) -> str:
    import re

    match = re.search(rf'data-stat="{name}"><div class="label">[^<]*</div>'
                      rf'<div class="value">([^<]*)<', body)
    assert match, name
    return match.group(1)


def test_backtest_panel_runs_the_policy_on_the_history(client, roles):
    from reclaim.backtest import policy_backtest
    from reclaim.conf import policy

    reclaim_fleet(roles, hours=5)  # history longer than the 2 h look-back
    client.force_login(roles.admin)
    body = body_of(client.get(reverse("reclaim_review") + "?days=1"))
    expected = policy_backtest(policy=policy(), days=1)
    assert expected.recommendations, "the idle GPUs would have been recommended"
    assert 'id="backtest-result"' in body
    assert backtest_stat(body, "backtest-recommendations") == str(len(expected.recommendations))
    assert backtest_stat(body, "backtest-gpu-hours") == f"{expected.gpu_hours_returned:.1f}"
    assert backtest_stat(body, "backtest-false") == str(expected.false_reclaims)
    # a stricter threshold finds nothing: nothing is busy less than 0 % of the time
    body = body_of(client.get(reverse("reclaim_review") + "?days=1&idle_busy_fraction=0"))
    assert backtest_stat(body, "backtest-recommendations") == "0"
    assert "idle below 0.0% busy" in body


def test_right_size_card_and_banner(client, roles, fleet):
    from gpuquota.usage.services import dirty_hours_process
    from reclaim.services import recommendations_evaluate

    reservation = reservation_with_telemetry(roles.team, utils=[ALTERNATING] * 4, now=fleet.now,
                                             host="sweep-node")
    dirty_hours_process()
    recommendations_evaluate(now=fleet.now)
    rec = fleet.recommendation(reservation, kind="right_size")
    assert rec.target_count == 2
    client.force_login(roles.admin)
    body = body_of(client.get(reverse("reclaim_review")))
    card = body[body.index(f'id="rec-{rec.pk}"'):]
    card = card[:card.index("</section>")]
    assert "Shrink from 4 to 2 GPUs" in card and "<strong>2</strong> of 4 held" in card
    assert card.count("<tr class=\"recommended\">") == 2 and "50.0%" in card
    lifecycle.recommendation_accept(recommendation=rec, actor=roles.admin)
    client.force_login(roles.lead)
    body = body_of(client.get(reverse("team_detail", args=["vision"])))
    banner = body[body.index(f'id="reclaim-notice-{rec.pk}"'):body.index("<h2>Quota</h2>")]
    assert f"Reservation #{reservation.pk} is to shrink from 4 to 2 GPUs" in banner
    assert "at most 2 GPUs were busy at once 95% of the time" in banner
    assert reverse("reclaim_object", args=[rec.pk]) in banner
    assert "Release them now" not in banner  # self-release gives back idle GPUs only


def test_anonymous_posts_go_to_the_login_page_and_change_nothing(client, roles, vision_rec):
    reservation = vision_rec.reservation
    urls = [reverse(name, args=[vision_rec.pk]) for name in (
        "reclaim_accept", "reclaim_dismiss", "reclaim_uphold", "reclaim_withdraw",
        "reclaim_object")]
    urls += [reverse("reclaim_accept_bulk"), reverse("reclaim_exemption_create"),
             reverse("reclaim_release_idle", args=[reservation.pk])]
    for url in urls:
        response = client.post(url, {"reason": "x", "ids": [vision_rec.pk]})
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
    vision_rec.refresh_from_db()
    assert vision_rec.status == "open" and not Exemption.objects.exists()
    assert reservation.assignments.filter(assigned_until__gt=timezone.now()).count() == 2
