"""A team's month to date and its month-end forecast (docs/budgets.md, "The forecast").

    forecast = to date
             + booked: the reserved seconds still to come this month of the team's
               scheduled and active reservations (count × their time in [now, month end),
               from max(start, approval)), at the reserved rate in force now
             + recent: the on-demand and borrowed charges less the lending credits of the
               last `RECENT_DAYS` days (the whole hours before now), each side's largest
               day counted as its second largest (a one-day burst is not repeated), per
               second, times the seconds left in the month (reports/forecast_recent.py)

To date is the draft statement's total (adjustments and credits included); nothing in
the future is credited (a failure is not forecast). Each part is rounded once, to the cent,
from an exact numerator (accounting.md, Time, money and rounding), and the forecast is the
sum of the parts. Reads only, for every team (or some) at once: one pricing pass and the
recent use's three queries."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q

from gpuquota.core.timeutil import Period, hour_floor
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Reservation
from reports.forecast_recent import DAY, RECENT_DAYS, capped_sum, recent_use
from reports.models import StatementLine
from reports.pricing import line_amount, round_half_up_cents, team_drafts

Kind = StatementLine.Kind
BOOKED = (Reservation.Status.SCHEDULED, Reservation.Status.ACTIVE, Reservation.Status.ENDED)


@dataclass
class Forecast:
    """A team's month as of `now`: what it has cost, what is booked, what recent use adds."""

    team_id: int
    now: datetime
    month: Period
    to_date: Decimal = Decimal("0.00")
    booked: Decimal = Decimal("0.00")
    booked_s: int = 0
    recent: Decimal = Decimal("0.00")
    recent_window: Period | None = None
    recent_amount: Decimal = Decimal("0.00")
    recent_counted: Decimal = Decimal("0.00")
    currency: str = ""
    errors: list[str] = field(default_factory=list)
    # GPU-hours per class (the class budgets'): chargeable hours to date (reserved less
    # failed, on-demand and borrowed), and to date + booked + recent, exact
    class_hours_to_date: dict[int, Fraction] = field(default_factory=dict)
    class_hours_total: dict[int, Fraction] = field(default_factory=dict)
    class_hours_recent: dict[int, Fraction] = field(default_factory=dict)

    def hours_to_date(self, gpu_class_id: int) -> Decimal:
        return hours_rounded(self.class_hours_to_date.get(gpu_class_id, Fraction(0)))

    def hours_total(self, gpu_class_id: int) -> Decimal:
        return hours_rounded(self.class_hours_total.get(gpu_class_id, Fraction(0)))

    @property
    def total(self) -> Decimal:
        return self.to_date + self.booked + self.recent

    @property
    def booked_hours(self) -> Decimal:
        return (Decimal(self.booked_s) / 3600).quantize(Decimal("0.01"))

    @property
    def basis(self) -> str:
        """The forecast's method in one sentence, with its figures."""
        days = (self.recent_window.seconds // 86400) if self.recent_window else 0
        return (f"{self.to_date} to date + {self.booked} for {self.booked_hours}"
                f" booked GPU-hours still to come at today's reserved rates + {self.recent} "
                f"on-demand and borrowed use at the last {days} days' rate, the busiest "
                f"day counted as the second busiest ({self.recent_amount} in those days, "
                f"{self.recent_counted} counted)")


def hours_rounded(hours: Fraction) -> Decimal:
    """GPU-hours to 0.01, half up, once."""
    return round_half_up_cents(hours)


def _class_hours(draft) -> dict[int, Fraction]:
    """A draft's chargeable GPU-hours per class: reserved less failed, on-demand, borrowed."""
    hours: dict[int, Fraction] = defaultdict(Fraction)
    for line in draft.lines:
        sign = {Kind.RESERVED: 1, Kind.ON_DEMAND: 1, Kind.BORROWED: 1,
                Kind.FAILURE_CREDIT: -1}.get(line.kind)
        if sign and line.seconds:
            hours[line.gpu_class_id] += Fraction(sign * line.seconds, 3600)
    return hours


def month_of(now: datetime) -> Period:
    return Period.month(now.year, now.month)


def _card_in_force(class_id: int, at: datetime, cards: dict[int, list[RateCard]]
                   ) -> RateCard | None:
    for card in cards.get(class_id, []):
        if card.valid_from <= at and (card.valid_until is None or at < card.valid_until):
            return card
    return None


def _booked(now: datetime, month: Period, team_ids: list[int] | None, *,
            booked_by: datetime | None) -> dict[int, tuple]:
    """Per team: (Σ seconds × rate, seconds, currencies, errors, seconds per class) of the
    reserved time still to come in `month`, of reservations requested by `booked_by` (the
    backtest's now) or of every one (None)."""
    reservations = Reservation.objects.filter(status__in=BOOKED, start__lt=month.end,
                                              end__gt=now)
    if booked_by is not None:
        reservations = reservations.filter(requested_at__lte=booked_by)
    if team_ids is not None:
        reservations = reservations.filter(team_id__in=team_ids)
    reservations = list(reservations.select_related("gpu_class"))
    cards: dict[int, list[RateCard]] = defaultdict(list)
    for card in RateCard.objects.filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=now),
            gpu_class_id__in={r.gpu_class_id for r in reservations}).order_by("valid_from"):
        cards[card.gpu_class_id].append(card)
    out: dict[int, tuple] = {}
    for reservation in reservations:
        charged_from = max(reservation.start, reservation.approved_at or reservation.start, now)
        seconds = reservation.count * Period(now, month.end).clip(charged_from, reservation.end)
        if not seconds:
            continue
        numerator, total, currencies, errors, by_class = out.get(
            reservation.team_id, (Fraction(0), 0, set(), [], defaultdict(int)))
        by_class[reservation.gpu_class_id] += seconds
        card = (_card_in_force(reservation.gpu_class_id, now, cards)
                or _card_in_force(reservation.gpu_class_id, charged_from, cards))
        if card is None:
            errors.append(f"No rate card for {reservation.gpu_class.name}: reservation "
                          f"#{reservation.pk} is left out of the forecast.")
        else:
            numerator += seconds * Fraction(card.reserved_rate)
            currencies.add(card.currency)
        out[reservation.team_id] = (numerator, total + seconds, currencies, errors, by_class)
    return out


def forecasts(*, now: datetime, team_ids: list[int] | None = None,
              booked_by: datetime | None = None) -> dict[int, Forecast]:
    """Every team's (or the given teams') month to date and month-end forecast as of `now`
    (whole seconds). `booked_by` limits the reservations to those requested by then (the
    backtest: what was known at `now`); by default every booked one counts."""
    now = now.replace(microsecond=0)
    month = month_of(now)
    to_date = team_drafts(period=month.to_date(now), month=month.start.date(),
                          team_ids=team_ids)
    # whole hours: read from the rollups alone, without the raw samples of the edge hours
    window = Period(hour_floor(now) - RECENT_DAYS * DAY, hour_floor(now))
    recent = recent_use(window=window, team_ids=team_ids)
    booked = _booked(now, month, team_ids, booked_by=booked_by)
    left = Fraction(Period(now, month.end).seconds, window.seconds)
    result: dict[int, Forecast] = {}
    for team_id in set(to_date) | set(recent) | set(booked):
        forecast = result[team_id] = Forecast(team_id=team_id, now=now, month=month,
                                              recent_window=window)
        currencies: set[str] = set()
        hours: dict[int, Fraction] = defaultdict(Fraction)
        if team_id in to_date:
            draft = to_date[team_id]
            forecast.to_date = draft.total
            forecast.errors += draft.errors
            currencies |= {line.currency for line in draft.lines if line.currency}
            forecast.class_hours_to_date = _class_hours(draft)
            hours.update(forecast.class_hours_to_date)
        if team_id in recent:
            use = recent[team_id]
            forecast.recent_amount = round_half_up_cents(use.amount)
            forecast.recent_counted = round_half_up_cents(use.counted)
            forecast.recent = round_half_up_cents(use.counted * left)
            currencies |= use.currencies
            for class_id, days in use.hours.items():
                forecast.class_hours_recent[class_id] = capped_sum(days) * left
                hours[class_id] += forecast.class_hours_recent[class_id]
        if team_id in booked:
            numerator, seconds, booked_currencies, errors, by_class = booked[team_id]
            forecast.booked, forecast.booked_s = line_amount(numerator), seconds
            for class_id, class_seconds in by_class.items():
                hours[class_id] += Fraction(class_seconds, 3600)
            forecast.errors += errors
            currencies |= booked_currencies
        if len(currencies) > 1:
            named = ", ".join(sorted(currencies))
            forecast.errors.append(f"Amounts in several currencies: {named}.")
        forecast.currency = currencies.pop() if len(currencies) == 1 else ""
        forecast.class_hours_total = dict(hours)
    return result
