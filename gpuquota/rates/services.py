"""Rate cards: created, ended and changed only here, by admins, audited (accounting.md,
Chargeback and Lending).

Each change names the overlaps it would cause (refused) and the gaps between cards it
would open (refused: a second with no card fails every draft over it), and has the apps
above re-price what they derived with the cards of that class (the `RATE_CARD_CHANGED`
hook: usage's rollups change card in place for whole hours, and the hours a boundary cuts
are marked for recompute). A boundary in an hour older than the raw-sample horizon is
refused when figures of the class exist there (the `RECOMPUTE_HORIZON` hook): their raw
samples are gone, so they could not be cut again.
"""

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.db import IntegrityError, transaction

from gpuquota.core.contributions import hooks_call, recompute_horizon
from gpuquota.core.errors import Conflict, DomainError, PermissionDenied
from gpuquota.core.fields import whole_second
from gpuquota.core.services import audit_record
from gpuquota.core.timeutil import hour_floor
from gpuquota.inventory.models import GpuClass
from gpuquota.rates.models import RateCard

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_RATE_LIMIT = Decimal("99999999.9999")


def _fmt(value: datetime | None) -> str:
    return "open end" if value is None else f"{value:%Y-%m-%d %H:%M:%S}Z"


def _admin_only(by) -> None:
    if by is None or not (by.is_authenticated and by.is_staff):
        raise PermissionDenied("Only admins can change rate cards.")


def _rate(value, field: str) -> Decimal:
    try:
        rate = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise DomainError("A rate must be a decimal number.", field=field) from None
    if not rate.is_finite() or rate < 0 or rate > _RATE_LIMIT:
        raise DomainError(f"A rate must be between 0 and {_RATE_LIMIT}.", field=field)
    if rate != rate.quantize(Decimal("0.0001")):
        raise DomainError("A rate has at most 4 decimal places.", field=field)
    return rate


def _currency(value: str) -> str:
    if not isinstance(value, str) or not _CURRENCY.match(value):
        raise DomainError("The currency must be an ISO 4217 code such as USD.",
                          field="currency")
    return value


def _spans(cards) -> list[tuple[datetime, datetime | None]]:
    return sorted(((c.valid_from, c.valid_until) for c in cards), key=lambda s: s[0])


def _gaps(spans: list[tuple[datetime, datetime | None]]) -> set[tuple[datetime, datetime]]:
    """Intervals between consecutive cards that no card covers."""
    gaps = set()
    for (_a, end), (start, _b) in zip(spans, spans[1:], strict=False):
        if end is not None and end < start:
            gaps.add((end, start))
    return gaps


def _overlaps(a: tuple, b: tuple) -> bool:
    return (a[1] is None or b[0] < a[1]) and (b[1] is None or a[0] < b[1])


def rate_cards_check(*, gpu_class: GpuClass, proposed: tuple[datetime, datetime | None],
                     replacing: RateCard | None = None) -> None:
    """Refuse a card interval of `gpu_class` (replacing `replacing`'s) that would overlap
    another card or open a gap between cards, naming the card or the gap."""
    start, end = proposed
    if end is not None and end <= start:
        raise DomainError("A rate card must end after it starts.", field="valid_until")
    others = [c for c in RateCard.objects.filter(gpu_class=gpu_class)
              if replacing is None or c.pk != replacing.pk]
    for card in others:
        if _overlaps(proposed, (card.valid_from, card.valid_until)):
            raise Conflict(
                f"Overlaps the {gpu_class.name} rate card from {_fmt(card.valid_from)} to "
                f"{_fmt(card.valid_until)} (reserved {card.reserved_rate} {card.currency}): "
                "rate cards of one class cannot overlap.", field="valid_from")
    before = _gaps(_spans([*others, *([replacing] if replacing else [])]))
    after = _gaps(sorted([*_spans(others), proposed], key=lambda s: s[0]))
    opened = sorted(after - before)
    if opened:
        gap = opened[0]
        raise Conflict(
            f"This would leave no {gpu_class.name} rate card from {_fmt(gap[0])} to "
            f"{_fmt(gap[1])}: a draft over those seconds would fail. Make the cards meet.",
            field="valid_until")


def _changed_hours_check(gpu_class: GpuClass, start: datetime, end: datetime | None) -> None:
    """Refuse re-pricing [start, end) when it reaches hours whose raw samples expired
    and which hold figures of the class (they could not be recomputed)."""
    first = hour_floor(start)
    horizon = recompute_horizon(start=start, end=end, gpu_class_id=gpu_class.pk)
    if horizon is not None:
        raise Conflict(
            f"Raw samples before {_fmt(horizon)} have expired: the {gpu_class.name} GPU-hours "
            f"from {_fmt(first)} that this change re-prices could not be recomputed. "
            f"Choose a boundary at or after {_fmt(horizon)}.", field="valid_from")


def _lock_class(gpu_class: GpuClass) -> None:
    """Serialise rate-card changes of one class (the gap check reads all its cards)."""
    GpuClass.objects.select_for_update().filter(pk=gpu_class.pk).first()


def _save(card: RateCard, **kwargs) -> None:
    try:
        with transaction.atomic():
            card.save(**kwargs)
    except IntegrityError:
        raise Conflict("Rate cards of one class cannot overlap (another change won the race).",
                       field="valid_from") from None


def _card_changes(card: RateCard) -> dict:
    return {"gpu_class": card.gpu_class.name, "valid_from": card.valid_from.isoformat(),
            "valid_until": card.valid_until.isoformat() if card.valid_until else None,
            "reserved_rate": str(card.reserved_rate),
            "on_demand_rate": str(card.on_demand_rate), "borrowed_rate": str(card.borrowed_rate),
            "currency": card.currency}


@transaction.atomic
def rate_card_create(*, gpu_class: GpuClass, valid_from: datetime,
                     valid_until: datetime | None = None, reserved_rate, on_demand_rate,
                     borrowed_rate=None, currency: str = "USD", by,
                     reason: str = "") -> RateCard:
    """A new rate card for [valid_from, valid_until) of a class: never overlapping another,
    never opening a gap between cards; audited; re-priced hours marked for recompute.
    Without a `borrowed_rate`, borrowed busy hours cost the on-demand rate."""
    _admin_only(by)
    valid_from = whole_second(valid_from)
    valid_until = whole_second(valid_until) if valid_until is not None else None
    card = RateCard(gpu_class=gpu_class, valid_from=valid_from, valid_until=valid_until,
                    reserved_rate=_rate(reserved_rate, "reserved_rate"),
                    on_demand_rate=_rate(on_demand_rate, "on_demand_rate"),
                    borrowed_rate=_rate(on_demand_rate if borrowed_rate is None
                                        else borrowed_rate, "borrowed_rate"),
                    currency=_currency(currency))
    _lock_class(gpu_class)
    rate_cards_check(gpu_class=gpu_class, proposed=(valid_from, valid_until))
    _changed_hours_check(gpu_class, valid_from, valid_until)
    _save(card)
    marked = sum(hooks_call("RATE_CARD_CHANGED", gpu_class_id=gpu_class.pk, start=valid_from,
                            end=valid_until, card_id=card.id))
    audit_record(actor=by, action="rate_card.create", obj=card, reason=reason,
                 changes={**_card_changes(card), "gpu_hours_marked": marked})
    return card


@transaction.atomic
def rate_card_end(*, rate_card: RateCard, at: datetime | None, by,
                  reason: str = "") -> RateCard:
    """Set when a card stops (None: open-ended again), never overlapping the next card nor
    opening a gap before it; audited; the hours between the old and new end marked."""
    _admin_only(by)
    at = whole_second(at) if at is not None else None
    _lock_class(rate_card.gpu_class)
    card = RateCard.objects.select_for_update().get(pk=rate_card.pk)
    old = card.valid_until
    if old == at:
        return card
    rate_cards_check(gpu_class=card.gpu_class, proposed=(card.valid_from, at), replacing=card)
    changed_from = min(v for v in (old, at) if v is not None)
    changed_until = None if old is None or at is None else max(old, at)
    _changed_hours_check(card.gpu_class, changed_from, changed_until)
    card.valid_until = at
    _save(card, update_fields=["valid_until"])
    shortened = at is not None and (old is None or at < old)
    marked = sum(hooks_call("RATE_CARD_CHANGED", gpu_class_id=card.gpu_class_id,
                            start=changed_from, end=changed_until,
                            card_id=None if shortened else card.id))
    audit_record(actor=by, action="rate_card.end", obj=card, reason=reason, changes={
        "gpu_class": card.gpu_class.name,
        "valid_until": [old.isoformat() if old else None, at.isoformat() if at else None],
        "gpu_hours_marked": marked})
    return card


@transaction.atomic
def rate_card_change(*, rate_card: RateCard, by, reserved_rate=None, on_demand_rate=None,
                     borrowed_rate=None, currency: str | None = None,
                     effective_from: datetime | None = None, reason: str = "") -> RateCard:
    """New rates or currency for a card. Without `effective_from` (or at its start) the
    card itself changes: its rollups hold the card, not the rate, so nothing is recomputed.
    With `effective_from` inside the card, the card ends there and a successor with the
    new values runs to the old end; the hours from then are marked. Audited."""
    _admin_only(by)
    _lock_class(rate_card.gpu_class)
    card = RateCard.objects.select_for_update().get(pk=rate_card.pk)
    values = {
        "reserved_rate": card.reserved_rate if reserved_rate is None
        else _rate(reserved_rate, "reserved_rate"),
        "on_demand_rate": card.on_demand_rate if on_demand_rate is None
        else _rate(on_demand_rate, "on_demand_rate"),
        "borrowed_rate": card.borrowed_rate if borrowed_rate is None
        else _rate(borrowed_rate, "borrowed_rate"),
        "currency": card.currency if currency is None else _currency(currency),
    }
    before = _card_changes(card)
    effective_from = whole_second(effective_from) if effective_from is not None else None
    if effective_from is None or effective_from == card.valid_from:
        for name, value in values.items():
            setattr(card, name, value)
        _save(card, update_fields=list(values))
        audit_record(actor=by, action="rate_card.change", obj=card, reason=reason,
                     changes={"before": before, "after": _card_changes(card)})
        return card
    if not (card.valid_from < effective_from
            and (card.valid_until is None or effective_from < card.valid_until)):
        raise DomainError(
            f"The change must take effect inside the card ({_fmt(card.valid_from)} to "
            f"{_fmt(card.valid_until)}).", field="effective_from")
    _changed_hours_check(card.gpu_class, effective_from, card.valid_until)
    old_until = card.valid_until
    card.valid_until = effective_from
    _save(card, update_fields=["valid_until"])
    successor = RateCard(gpu_class=card.gpu_class, valid_from=effective_from,
                         valid_until=old_until, **values)
    _save(successor)
    marked = sum(hooks_call("RATE_CARD_CHANGED", gpu_class_id=card.gpu_class_id,
                            start=effective_from, end=old_until, card_id=successor.id))
    audit_record(actor=by, action="rate_card.change", obj=successor, reason=reason, changes={
        "before": before, "after": _card_changes(successor),
        "effective_from": effective_from.isoformat(), "gpu_hours_marked": marked})
    return successor
