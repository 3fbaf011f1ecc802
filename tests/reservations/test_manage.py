"""Admins' pages for quotas and rate cards (through the audited services) and the list of
all reservations; the quota services' rules."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota
from gpuquota.reservations.quotas import quota_create, quota_end
from tests.factories import GpuClassFactory, RateCardFactory, TeamFactory
from tests.reservations.factories import Fleet

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
FMT = "%Y-%m-%dT%H:%M"


@pytest.fixture
def now():
    return timezone.now().replace(second=0, microsecond=0)


@pytest.fixture
def fleet():
    return Fleet.create(vision_quota=4, speech_quota=2)


def test_quota_rows_meet_never_overlap_and_are_audited(fleet, now):
    row = fleet.vision.quotas.get()  # open-ended since the epoch
    with pytest.raises(Conflict) as exc:
        quota_create(team=fleet.vision, gpu_class=fleet.gpu_class, gpus=6,
                     valid_from=now + H, by=fleet.admin)
    assert "Overlaps Vision's H100-80GB quota of 4 GPU(s)" in exc.value.message
    ended = quota_end(quota=row, at=now + H, by=fleet.admin, reason="growth", now=now)
    assert ended.valid_until == now + H
    with pytest.raises(Conflict) as exc:
        quota_create(team=fleet.vision, gpu_class=fleet.gpu_class, gpus=6,
                     valid_from=now + 2 * H, by=fleet.admin, now=now)
    assert "no H100-80GB quota row from" in exc.value.message and "0-GPU row" in exc.value.message
    quota_create(team=fleet.vision, gpu_class=fleet.gpu_class, gpus=6, valid_from=now + H,
                 by=fleet.admin, now=now)
    assert list(fleet.vision.quotas.order_by("valid_from").values_list("gpus", flat=True)) == \
        [4, 6]
    with pytest.raises(Conflict):  # ending the first now would leave a gap before the second
        quota_end(quota=row, at=now + 30 * timedelta(minutes=1), by=fleet.admin, now=now)
    actions = list(AuditEntry.objects.filter(action__startswith="quota.").values_list(
        "action", flat=True))
    assert sorted(actions) == ["quota.create", "quota.end"]


def test_quota_services_refuse_the_past_non_admins_and_bad_sizes(fleet, now):
    with pytest.raises(DomainError, match="not rewritten"):
        quota_end(quota=fleet.vision.quotas.get(), at=now - 2 * H, by=fleet.admin, now=now)
    with pytest.raises(PermissionDenied):
        quota_end(quota=fleet.vision.quotas.get(), at=now + H, by=fleet.vision_lead, now=now)
    with pytest.raises(DomainError, match="whole number"):
        quota_create(team=TeamFactory(), gpu_class=fleet.gpu_class, gpus=-1,
                     valid_from=now + H, by=fleet.admin, now=now)


def _admin(fleet) -> Client:
    client = Client()
    client.force_login(fleet.admin)
    return client


def test_admin_adds_and_ends_quota_rows_in_the_product(fleet, now):
    client = _admin(fleet)
    page = client.get("/manage/quotas/", {"team": "vision"}).content.decode()
    assert 'id="quotas"' in page and "Speech" not in page.split('id="quotas"')[1].split(
        "</table>")[0]
    row = fleet.vision.quotas.get()
    response = client.post(f"/manage/quotas/{row.pk}/end/",
                           {"at": (now + H).strftime(FMT), "reason": "reorg"}, follow=True)
    assert "quota row updated" in response.content.decode()
    refused = client.post("/manage/quotas/", {
        "team": fleet.vision.pk, "gpu_class": fleet.gpu_class.pk, "gpus": 8,
        "valid_from": (now + 2 * H).strftime(FMT), "valid_until": ""})
    assert refused.status_code == 200 and "0-GPU row" in refused.content.decode()
    added = client.post("/manage/quotas/", {
        "team": fleet.vision.pk, "gpu_class": fleet.gpu_class.pk, "gpus": 8,
        "valid_from": (now + H).strftime(FMT), "valid_until": ""}, follow=True)
    assert "Quota row added." in added.content.decode()
    assert Quota.objects.filter(team=fleet.vision, gpus=8, valid_from=now + H).exists()
    bad = client.post("/manage/quotas/", {"team": fleet.vision.pk, "gpu_class": "x",
                                          "gpus": "many", "valid_from": "soon"})
    assert bad.status_code == 200 and "errorlist" in bad.content.decode()


def test_admin_adds_a_rate_card_and_a_gap_is_refused_with_the_reason(fleet, now):
    card = RateCardFactory(gpu_class=fleet.gpu_class)
    client = _admin(fleet)
    end = client.post(f"/manage/rate-cards/{card.pk}/end/", {"at": (now + H).strftime(FMT)},
                      follow=True)
    assert "rate card was updated" in end.content.decode()
    form = {"gpu_class": fleet.gpu_class.pk, "reserved_rate": "3.10", "on_demand_rate": "3.50",
            "currency": "USD", "valid_until": ""}
    gap = client.post("/manage/rate-cards/", {**form, "valid_from": (now + 3 * H).strftime(FMT)})
    assert "would leave no H100-80GB rate card" in gap.content.decode()
    ok = client.post("/manage/rate-cards/", {**form, "valid_from": (now + H).strftime(FMT)},
                     follow=True)
    assert "Rate card added." in ok.content.decode()
    assert RateCard.objects.filter(gpu_class=fleet.gpu_class).count() == 2
    assert AuditEntry.objects.filter(action="rate_card.create").exists()


def test_all_reservations_with_filters(fleet, now):
    l4 = GpuClassFactory(name="L4")
    fleet.request(count=1, now=now, start=now + H, end=now + 2 * H)
    fleet.request(team=fleet.speech, count=1, now=now, start=now + H, end=now + 2 * H)
    client = _admin(fleet)
    every = client.get("/manage/reservations/").content.decode()
    assert every.count('id="reservation-') == 2
    speech = client.get("/manage/reservations/", {"team": "speech"}).content.decode()
    assert speech.count('id="reservation-') == 1
    none = client.get("/manage/reservations/", {"gpu_class": l4.name}).content.decode()
    assert "No reservation matches." in none
    month = f"{now:%Y-%m}"
    assert client.get("/manage/reservations/", {"month": month, "status": "scheduled"}
                      ).content.decode().count('id="reservation-') == 2
    bad = client.get("/manage/reservations/", {"month": "2026-13", "status": "nope"})
    assert bad.status_code == 200 and "Pick a month as YYYY-MM." in bad.content.decode()


@pytest.mark.parametrize("role", ["lead", "member", "other_lead", "outsider"])
@pytest.mark.parametrize("url", ["/manage/quotas/", "/manage/rate-cards/",
                                 "/manage/reservations/"])
def test_manage_pages_are_for_admins_only(roles, role, url):
    client = Client()
    client.force_login(getattr(roles, role))
    assert client.get(url).status_code == 404
    assert client.post(url, {}).status_code == 404


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_manage_pages_run_the_same_queries_at_two_sizes(fleet, now):
    RateCardFactory(gpu_class=fleet.gpu_class)
    fleet.request(count=1, now=now, start=now + H, end=now + 2 * H)
    client = _admin(fleet)
    urls = ["/manage/quotas/", "/manage/rate-cards/", "/manage/reservations/"]
    small = [_count(client, url) for url in urls]
    for i in range(6):
        team = TeamFactory(slug=f"t{i}")
        quota_create(team=team, gpu_class=fleet.gpu_class, gpus=1, valid_from=now + H,
                     by=fleet.admin, now=now)
        fleet.request(count=1, now=now, start=now + (3 + i) * H, end=now + (4 + i) * H)
    assert [_count(client, url) for url in urls] == small
