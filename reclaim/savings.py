"""What giving GPUs back saves: their remaining assigned seconds up to the
reservation's end × the reserved rate in force for each second, split at rate-card
changes, with one division and one rounding (accounting.md, Time and numbers)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Q

from gpuquota.reservations.models import Assignment, Reservation
from reports.models import RateCard

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Savings:
    amount: Decimal | None  # None: no second of it is priced
    currency: str
    seconds: int
    unpriced_s: int


def _s(value: datetime) -> int:
    return int(value.timestamp())


def remaining_savings(*, reservation: Reservation, gpu_ids: list[int], at: datetime) -> Savings:
    """Σ over the GPUs' assignments still running at `at` of seconds × reserved rate
    from `at` (or the charged start, if later) to their end. Two queries."""
    spans = []
    for row in Assignment.objects.filter(
        reservation=reservation, gpu_id__in=gpu_ids, assigned_until__gt=at
    ).values("assigned_from", "assigned_until"):
        charged = max(row["assigned_from"], reservation.start,
                      reservation.approved_at or reservation.start, at)
        if charged < row["assigned_until"]:
            spans.append((_s(charged), _s(row["assigned_until"])))
    return spans_amount(gpu_class_id=reservation.gpu_class_id, spans=spans)


def spans_amount(*, gpu_class_id: int, spans: list[tuple[int, int]]) -> Savings:
    """Σ seconds × reserved rate in force over epoch-second spans of one class, one
    rounding. One query."""
    if not spans:
        return Savings(Decimal("0.00"), "", 0, 0)
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
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
