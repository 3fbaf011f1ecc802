"""What giving GPUs back saves: their remaining assigned seconds up to the
reservation's end × the reserved rate in force for each second, split at rate-card
changes, with one division and one rounding (accounting.md, Time and numbers)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Q

from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Reservation

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Savings:
    amount: Decimal | None  # None: no second of it is priced
    currency: str
    seconds: int
    unpriced_s: int


def _s(value: datetime) -> int:
    return int(value.timestamp())


def remaining_savings(*, reservation: Reservation, assignments: list[dict], at: datetime,
                      cards: list[RateCard] | None = None) -> Savings:
    """Σ over the given assignment rows (`assigned_from`, `assigned_until`) still
    running at `at` of seconds × reserved rate from `at` (or the charged start, if
    later) to their end."""
    spans = []
    for row in assignments:
        charged = max(row["assigned_from"], reservation.start,
                      reservation.approved_at or reservation.start, at)
        if charged < row["assigned_until"]:
            spans.append((_s(charged), _s(row["assigned_until"])))
    return spans_amount(gpu_class_id=reservation.gpu_class_id, spans=spans, cards=cards)


def rate_cards(*, gpu_class_ids, since: datetime) -> dict[int, list[RateCard]]:
    """Per class, its rate cards in force at or after `since`. One query."""
    cards: dict[int, list[RateCard]] = {c: [] for c in gpu_class_ids}
    for card in RateCard.objects.filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=since), gpu_class_id__in=list(cards),
    ).order_by("valid_from"):
        cards[card.gpu_class_id].append(card)
    return cards


def spans_amount(*, gpu_class_id: int, spans: list[tuple[int, int]],
                 cards: list[RateCard] | None = None) -> Savings:
    """Σ seconds × reserved rate in force over epoch-second spans of one class, one
    rounding. One query, none when the class's `cards` (from `rate_cards`) are given."""
    if not spans:
        return Savings(Decimal("0.00"), "", 0, 0)
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    if cards is None:
        cards = list(RateCard.objects.filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=datetime.fromtimestamp(lo, tz=UTC)),
            gpu_class_id=gpu_class_id,
            valid_from__lt=datetime.fromtimestamp(hi, tz=UTC),
        ).order_by("valid_from"))
    numerator, priced, currency = Decimal(0), 0, ""
    for card in cards:
        c0 = _s(card.valid_from)
        c1 = hi if card.valid_until is None else _s(card.valid_until)
        for a, b in spans:
            seconds = max(0, min(b, c1) - max(a, c0))
            if seconds:
                numerator += seconds * card.reserved_rate
                priced += seconds
                currency = currency or card.currency
    total = sum(b - a for a, b in spans)
    amount = (numerator / 3600).quantize(CENT, rounding=ROUND_HALF_UP) if priced else None
    return Savings(amount, currency, total, total - priced)
