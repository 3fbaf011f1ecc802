"""Rate cards change only through audited services that re-price the rollups they touch
(accounting.md: Chargeback; issue 9, part 1)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from gpuquota.core.errors import Conflict, PermissionDenied
from gpuquota.core.models import AuditEntry
from gpuquota.core.timeutil import Period
from gpuquota.outbox.models import DirtyGpuHour
from gpuquota.rates.models import RateCard
from gpuquota.rates.services import rate_card_change, rate_card_create, rate_card_end
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.pricing import chargeable_seconds
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import AdminFactory, GpuClassFactory, UserFactory, make_gpu
from tests.usage.factories import T0, minute_samples
from tests.usage.oracle_days import assert_day_rows_are_the_hours_summed

pytestmark = pytest.mark.django_db
H, M, S = timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1)


def _card(gpu_class, start, end=None, rate="2.00", **extra):
    return rate_card_create(gpu_class=gpu_class, valid_from=start, valid_until=end,
                            reserved_rate=rate, on_demand_rate="3.00", by=AdminFactory(),
                            **extra)


def _busy_fleet(klass, hours=3):
    gpu = make_gpu(gpu_class=klass)
    minute_samples(gpu, T0, 60 * hours, util=50)
    dirty_hours_process()
    return gpu


def _by_card(gpu):
    rows = GpuHourUsage.objects.filter(gpu=gpu).values_list("hour", "rate_card_id", "busy_s")
    return sorted(rows, key=lambda r: (r[0], r[1] or 0))


def test_only_admins_change_rate_cards():
    klass = GpuClassFactory()
    with pytest.raises(PermissionDenied):
        rate_card_create(gpu_class=klass, valid_from=T0, reserved_rate="1", on_demand_rate="1",
                         by=UserFactory())
    assert not RateCard.objects.exists()


def test_create_mid_hour_cuts_that_hour_and_relabels_the_whole_hours_after():
    klass = GpuClassFactory(name="H100")
    gpu = _busy_fleet(klass)
    card = _card(klass, T0 + 30 * M + 15 * S)
    # the whole hours after the boundary carry the card at once; the cut hour is dirty
    assert [r[1] for r in _by_card(gpu)] == [None, card.id, card.id]
    assert list(DirtyGpuHour.objects.values_list("gpu_id", "hour")) == [(gpu.id, T0)]
    dirty_hours_process()
    assert _by_card(gpu) == [(T0, None, 1815), (T0, card.id, 1785),
                             (T0 + H, card.id, 3600), (T0 + 2 * H, card.id, 3600)]
    entry = AuditEntry.objects.get(action="rate_card.create")
    assert entry.object_id == str(card.id) and entry.changes["gpu_class"] == "H100"
    assert entry.changes["reserved_rate"] == "2.00" and entry.changes["gpu_hours_marked"] == 1


def test_overlaps_and_gaps_are_refused_naming_them():
    klass = GpuClassFactory(name="L4")
    _card(klass, T0, T0 + H)
    with pytest.raises(Conflict, match="Overlaps the L4 rate card from 2026-10-31 22:00:00Z "
                                       "to 2026-10-31 23:00:00Z"):
        _card(klass, T0 + 30 * M, T0 + 2 * H)
    with pytest.raises(Conflict, match="no L4 rate card from 2026-10-31 23:00:00Z to "
                                       "2026-10-31 23:10:00Z"):
        _card(klass, T0 + H + 10 * M)
    with pytest.raises(Conflict, match="no L4 rate card from 2026-10-31 21:50:00Z to "
                                       "2026-10-31 22:00:00Z"):
        _card(klass, T0 - H, T0 - 10 * M)
    later = _card(klass, T0 + H)  # meets the first: no gap
    assert RateCard.objects.filter(gpu_class=klass).count() == 2
    first = RateCard.objects.get(gpu_class=klass, valid_from=T0)
    with pytest.raises(Conflict, match="no L4 rate card from 2026-10-31 22:40:00Z to "
                                       "2026-10-31 23:00:00Z"):
        rate_card_end(rate_card=first, at=T0 + 40 * M, by=AdminFactory())
    with pytest.raises(Conflict, match="Overlaps the L4 rate card from 2026-10-31 23:00:00Z"):
        rate_card_end(rate_card=first, at=T0 + 2 * H, by=AdminFactory())
    assert rate_card_end(rate_card=later, at=T0 + 5 * H, by=AdminFactory()).valid_until \
        == T0 + 5 * H


def test_ending_a_card_takes_the_hours_after_out_of_it():
    klass = GpuClassFactory()
    gpu = _busy_fleet(klass)
    card = _card(klass, T0)
    dirty_hours_process()
    rate_card_end(rate_card=card, at=T0 + H + 20 * M, by=AdminFactory(), reason="retired")
    assert _by_card(gpu)[-1] == (T0 + 2 * H, None, 3600)
    dirty_hours_process()
    assert _by_card(gpu) == [(T0, card.id, 3600), (T0 + H, None, 2400),
                             (T0 + H, card.id, 1200), (T0 + 2 * H, None, 3600)]
    assert_day_rows_are_the_hours_summed()  # relabelled and cut hours: day rows unchanged
    entry = AuditEntry.objects.get(action="rate_card.end")
    assert entry.reason == "retired" and entry.changes["valid_until"] == [
        None, (T0 + H + 20 * M).isoformat()]


def test_change_in_place_or_from_an_instant():
    klass = GpuClassFactory()
    _busy_fleet(klass, hours=2)
    card = _card(klass, T0)
    dirty_hours_process()
    same = rate_card_change(rate_card=card, reserved_rate="2.10", by=AdminFactory())
    assert same.id == card.id and same.reserved_rate == Decimal("2.10")
    assert not DirtyGpuHour.objects.exists()  # rollups hold the card, not its rate
    successor = rate_card_change(rate_card=card, on_demand_rate="4.00", by=AdminFactory(),
                                 effective_from=T0 + 45 * M)
    assert (successor.valid_from, successor.valid_until) == (T0 + 45 * M, None)
    assert (successor.reserved_rate, successor.on_demand_rate) == (Decimal("2.10"),
                                                                   Decimal("4.00"))
    dirty_hours_process()
    found = chargeable_seconds(period=Period(T0, T0 + 2 * H))
    assert [(r["rate_card_id"], r["busy_s"]) for r in found.on_demand] == [
        (card.id, 2700), (successor.id, 900 + 3600)]
    assert_day_rows_are_the_hours_summed()
    assert AuditEntry.objects.filter(action="rate_card.change").count() == 2


def test_a_boundary_older_than_the_raw_sample_horizon_is_refused(monkeypatch):
    from gpuquota.ingest import conf as ingest_conf

    klass = GpuClassFactory(name="A100")
    _busy_fleet(klass)
    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 10)
    with pytest.raises(Conflict, match="Raw samples before .* have expired: the A100 "
                                       "GPU-hours from 2026-10-31 22:00:00Z"):
        _card(klass, T0 + 30 * M)
    other = GpuClassFactory()  # no rollups there: nothing would need recomputing
    assert _card(other, T0 + 30 * M).valid_from == T0 + 30 * M


def test_admin_saves_through_the_services_and_shows_refusals(client):
    klass = GpuClassFactory(name="T4")
    client.force_login(AdminFactory())
    add = reverse("admin:rates_ratecard_add")
    form = {"gpu_class": klass.id, "valid_from_0": "2026-10-31", "valid_from_1": "22:00:00",
            "reserved_rate": "1.50", "on_demand_rate": "2.00", "currency": "USD"}
    assert client.post(add, form).status_code == 302
    card = RateCard.objects.get(gpu_class=klass)
    assert AuditEntry.objects.filter(action="rate_card.create", object_id=str(card.id)).exists()
    refused = client.post(add, {**form, "valid_from_1": "23:00:00"})
    assert refused.status_code == 200 and b"cannot overlap" in refused.content
    gap = client.post(add, {**form, "valid_from_0": "2026-10-30", "valid_until_0": "2026-10-30",
                            "valid_until_1": "23:00:00"})
    assert b"no T4 rate card from 2026-10-30 23:00:00Z" in gap.content
    change = reverse("admin:rates_ratecard_change", args=[card.id])
    edited = client.post(change, {"valid_until_0": "2026-11-01", "valid_until_1": "00:00:00",
                                  "reserved_rate": "1.75", "on_demand_rate": "2.00",
                                  "currency": "USD"})
    assert edited.status_code == 302
    card.refresh_from_db()
    assert card.valid_until == T0 + 2 * H and card.reserved_rate == Decimal("1.75")
    assert {"rate_card.end", "rate_card.change"} <= set(
        AuditEntry.objects.values_list("action", flat=True))
    assert client.post(reverse("admin:rates_ratecard_delete", args=[card.id]),
                       {"post": "yes"}).status_code == 403


def test_the_borrowed_rate_defaults_to_the_on_demand_rate_is_checked_and_audited():
    from gpuquota.core.errors import DomainError

    klass = GpuClassFactory(name="A100")
    card = _card(klass, T0)
    assert card.borrowed_rate == Decimal("3.00")  # none given: the on-demand rate
    with pytest.raises(DomainError) as refused:
        rate_card_change(rate_card=card, by=AdminFactory(), borrowed_rate="-1")
    assert refused.value.field == "borrowed_rate"
    card = rate_card_change(rate_card=card, by=AdminFactory(), borrowed_rate="1.2345",
                            effective_from=T0 + H)
    assert (card.valid_from, card.borrowed_rate, card.reserved_rate) == (
        T0 + H, Decimal("1.2345"), Decimal("2.00"))
    entry = AuditEntry.objects.filter(action="rate_card.change").get()
    assert entry.object_type == "rates.ratecard"
    assert (entry.changes["before"]["borrowed_rate"], entry.changes["after"]["borrowed_rate"]) \
        == ("3.0000", "1.2345")


def test_the_manage_page_sets_and_shows_the_borrowed_rate(client):
    klass = GpuClassFactory(name="L40S")
    client.force_login(AdminFactory())
    url = reverse("manage_rate_cards")
    form = {"gpu_class": klass.id, "reserved_rate": "1.00", "on_demand_rate": "1.50",
            "borrowed_rate": "0.7500", "currency": "USD", "valid_from": "2026-10-31 22:00"}
    assert client.post(url, form).status_code == 302
    assert RateCard.objects.get(gpu_class=klass).borrowed_rate == Decimal("0.75")
    assert ">0.7500<" in client.get(url).content.decode()
    bad = client.post(url, {**form, "borrowed_rate": "-2"})
    assert bad.status_code in (200, 400) and RateCard.objects.filter(gpu_class=klass).count() == 1
