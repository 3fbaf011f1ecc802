"""The team's side of reclaim (banner, objection, self-release, audit) and a
recommendation's own page, against every role, with bad input."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Assignment
from reclaim.models import Exemption, Recommendation
from tests.reclaimui.helpers import (
    accepted,
    as_each,
    body_of,
    login,
    messages_of,
)

pytestmark = pytest.mark.django_db


def test_pages_need_sign_in(client, roles, vision_rec):
    for url in (reverse("reclaim_review"), reverse("reclaim_detail", args=[vision_rec.pk])):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


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
