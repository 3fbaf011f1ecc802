"""The seconds chargeback prices (accounting.md, Chargeback), per team, GPU class in force
and rate card in force at each second.

Reserved and failed reserved seconds are SQL aggregates over assignments ∩ charged window
∩ class intervals ∩ rate cards (exact for any past period, they never read samples); a
second with no rate card is reported with `rate_card_id` None, so the draft can name it.
On-demand and borrowed busy seconds come from the hourly rollups, which are cut at rate-card
boundaries, plus the partial edge hours from raw samples with the same rule; failed time is
left out (accounting.md, Lending: failed seconds are neither borrowed nor credited).
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q, QuerySet, Sum, Value
from django.db.models.functions import Least

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Reservation
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import BORROWED, UNRESERVED
from gpuquota.usage.seconds import _assignments, _charged_from, _until, seconds_annotate
from gpuquota.usage.selectors import _split, usage_rows

_CLASS = "gpu__class_history__"
_CARD = "gpu__class_history__gpu_class__rate_cards__"
_HEALTH = "gpu__health_history__"
_TEAM, _CLASS_ID, _CARD_ID = "reservation__team_id", f"{_CLASS}gpu_class_id", f"{_CARD}id"


@dataclass(frozen=True)
class ChargeableSeconds:
    """Integer seconds to price. `reserved` and `failed_reserved` rows:
    {"team_id", "gpu_class_id", "rate_card_id" (None = no card), "seconds"}; `on_demand`
    rows: {"team_id" (None = unattributed), "gpu_class_id", "rate_card_id", "split_ways",
    "busy_s"}, a team's exact share being busy_s / split_ways. `borrowed` rows: the same,
    the team being the borrowing owner team, with "lender_id" (the reserving team of the
    lent GPU). Rows with 0 seconds are left out; rows are sorted for stable output."""

    reserved: list[dict]
    failed_reserved: list[dict]
    on_demand: list[dict]
    borrowed: list[dict] = ()


def _overlaps(prefix: str, period: Period) -> Q:
    return Q(**{f"{prefix}valid_from__lt": period.end}) & (
        Q(**{f"{prefix}valid_until__isnull": True})
        | Q(**{f"{prefix}valid_until__gt": period.start})
    )


def _grouped(queryset: QuerySet, fields: tuple[str, ...]) -> dict[tuple, int]:
    rows = queryset.values(*fields).annotate(total=Sum("seconds_d")).order_by()
    return {tuple(row[f] for f in fields): int(row["total"].total_seconds())
            for row in rows if row["total"]}


def _reserved_by_card(period: Period, team_ids: list[int] | None, failed: bool
                      ) -> list[dict]:
    """(team, class in force, card in force) seconds of assignments ∩ charged window,
    optionally ∩ failed intervals; the seconds no card covers as rate_card_id None."""
    filters = Q(**{f"{_CLASS}isnull": False}) & _overlaps(_CLASS, period)
    lows = [F(f"{_CLASS}valid_from")]
    highs = [F("assigned_until"), Value(period.end), _until(f"{_CLASS}valid_until", period)]
    if failed:
        filters &= Q(**{f"{_HEALTH}state": GpuHealthInterval.State.FAILED})
        filters &= _overlaps(_HEALTH, period)
        lows.append(F(f"{_HEALTH}valid_from"))
        highs.append(_until(f"{_HEALTH}valid_until", period))
    if team_ids is not None:
        filters &= Q(reservation__team_id__in=team_ids)
    # One filter() call each: a second call would join the class intervals again.
    base = _assignments(period).filter(filters)
    totals = _grouped(
        seconds_annotate(base, _charged_from(period, *lows), Least(*highs)), (_TEAM, _CLASS_ID))
    # Cards never overlap per class, so the card rows add up to at most the total.
    carded = _assignments(period).filter(
        filters & Q(**{f"{_CARD}isnull": False}) & _overlaps(_CARD, period))
    by_card = _grouped(
        seconds_annotate(
            carded, _charged_from(period, *lows, F(f"{_CARD}valid_from")),
            Least(*highs, _until(f"{_CARD}valid_until", period))),
        (_TEAM, _CLASS_ID, _CARD_ID))
    uncovered = dict(totals)
    for (team_id, class_id, _card), seconds in by_card.items():
        uncovered[(team_id, class_id)] -= seconds
    rows = [{"team_id": t, "gpu_class_id": c, "rate_card_id": r, "seconds": s}
            for (t, c, r), s in by_card.items()]
    rows += [{"team_id": t, "gpu_class_id": c, "rate_card_id": None, "seconds": s}
             for (t, c), s in uncovered.items() if s]
    return sorted(rows, key=_order)


def _order(row: dict) -> tuple:
    return tuple((value is None, value or 0) for value in row.values())


def _busy(period: Period, kind: str, fields: tuple[str, ...]) -> dict[tuple, int]:
    """Non-failed busy seconds of one kind of rollup bucket, summed per `fields`: whole
    hours in one lean aggregate over the rollups, partial hours from raw samples."""
    hours, edges = _split(period)
    rows: list[dict] = []
    if hours is not None:
        rows += GpuHourUsage.objects.filter(
            hour__gte=hours[0], hour__lt=hours[1], kind=kind, failed=False,
        ).values(*fields).annotate(busy_s=Sum("busy_s")).order_by()
    for start, end in edges:  # partial hours, from raw samples by the same rule
        rows += usage_rows(period=Period(start, end), edge_gpu_ids=lambda a, b: None,
                           key_fields=(*fields, "kind", "failed"), kind=kind, failed=False)
    grouped: dict[tuple, int] = defaultdict(int)
    for row in rows:
        grouped[tuple(row[f] for f in fields)] += int(row["busy_s"])
    return grouped


_ON_DEMAND = ("team_id", "gpu_class_id", "rate_card_id", "split_ways")


def _on_demand(period: Period, team_ids: list[int] | None) -> list[dict]:
    result = [dict(zip((*_ON_DEMAND, "busy_s"), (*key, seconds), strict=True))
              for key, seconds in _busy(period, UNRESERVED, _ON_DEMAND).items()
              if seconds and (team_ids is None or key[0] in team_ids)]
    return sorted(result, key=_order)


def _borrowed(period: Period, team_ids: list[int] | None) -> list[dict]:
    """Borrowed busy seconds per borrowing team, lending team, class, card and split."""
    grouped = _busy(period, BORROWED, (*_ON_DEMAND, "reservation_id"))
    lenders = dict(Reservation.objects.filter(id__in={key[-1] for key in grouped})
                   .values_list("id", "team_id"))
    result: dict[tuple, int] = defaultdict(int)
    for (*key, reservation_id), seconds in grouped.items():
        lender = lenders[reservation_id]
        if team_ids is None or key[0] in team_ids or lender in team_ids:
            result[(*key, lender)] += seconds
    rows = [dict(zip((*_ON_DEMAND, "lender_id", "busy_s"), (*key, seconds), strict=True))
            for key, seconds in result.items() if seconds]
    return sorted(rows, key=_order)


def chargeable_seconds(*, period: Period, team_ids: list[int] | None = None
                       ) -> ChargeableSeconds:
    """Seconds to price, per team, class in force and rate card in force, for all teams
    (None) or the given ones, in a bounded number of queries whatever the fleet size:
    reserved from max(start, approved_at), failed reserved for the failure credit, and
    unreserved busy on-demand seconds with their split, and the borrowed busy seconds of
    lent GPUs with their split and lender (failed time excluded from both)."""
    return ChargeableSeconds(
        reserved=_reserved_by_card(period, team_ids, failed=False),
        failed_reserved=_reserved_by_card(period, team_ids, failed=True),
        on_demand=_on_demand(period, team_ids),
        borrowed=_borrowed(period, team_ids),
    )


def rate_card_gaps(*, gpu_class_ids: Iterable[int], period: Period
                   ) -> dict[int, list[tuple[datetime, datetime]]]:
    """The sub-intervals of `period` with no rate card, in order, for each class: one
    query whatever the classes."""
    cards: dict[int, list] = {class_id: [] for class_id in gpu_class_ids}
    for class_id, valid_from, valid_until in (
            RateCard.objects.filter(_overlaps("", period), gpu_class_id__in=cards)
            .order_by("gpu_class_id", "valid_from")
            .values_list("gpu_class_id", "valid_from", "valid_until")):
        cards[class_id].append((valid_from, valid_until))
    return {class_id: _gaps(class_cards, period) for class_id, class_cards in cards.items()}


def _gaps(cards: list[tuple], period: Period) -> list[tuple[datetime, datetime]]:
    gaps, cursor = [], period.start
    for valid_from, valid_until in cards:
        if valid_from > cursor:
            gaps.append((cursor, min(valid_from, period.end)))
        cursor = max(cursor, valid_until or period.end)
        if cursor >= period.end:
            break
    if cursor < period.end:
        gaps.append((cursor, period.end))
    return gaps
