"""The recent use the forecast extrapolates (docs/budgets.md, "The forecast"): each team's
on-demand and borrowed charges and lending credits, day by day, over the whole hours of the
last `RECENT_DAYS` days, and the robust daily rate drawn from them.

The rate is a winsorized mean: the largest day's charges are counted as the second largest
day's (and the same for credits), so a one-day burst is taken as one-off and not repeated
over the rest of the month, while use seen on two days or more counts in full. Read from
the hourly rollups alone (three queries, whatever the number of teams)."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from fractions import Fraction

from django.db.models import Q, Sum

from gpuquota.core.timeutil import Period
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Reservation
from gpuquota.usage.models import GpuHourUsage
from gpuquota.usage.rollup import BORROWED, UNRESERVED
from reports.pricing import card_rate

RECENT_DAYS = 7
DAY = timedelta(days=1)


@dataclass
class RecentUse:
    """A team's last days, exact (Σ seconds × rate ÷ 3600), most recent day first."""

    charges: list[Fraction] = field(default_factory=lambda: [Fraction(0)] * RECENT_DAYS)
    credits: list[Fraction] = field(default_factory=lambda: [Fraction(0)] * RECENT_DAYS)
    currencies: set[str] = field(default_factory=set)
    # the charged busy GPU-hours (on-demand and borrowed) per class and day
    hours: dict[int, list[Fraction]] = field(default_factory=dict)

    @property
    def amount(self) -> Fraction:
        """What the days cost, credits deducted."""
        return sum(self.charges) - sum(self.credits)

    @property
    def counted(self) -> Fraction:
        """The amount the rate is drawn from: each side's largest day capped at its second."""
        return capped_sum(self.charges) - capped_sum(self.credits)


def capped_sum(days: list[Fraction]) -> Fraction:
    """The sum of `days` with the largest counted as the second largest."""
    if len(days) < 2:
        return Fraction(0)
    largest, second = sorted(days, reverse=True)[:2]
    return sum(days) - largest + second


def _rows(window: Period, team_ids: list[int] | None) -> list[dict]:
    rows = GpuHourUsage.objects.filter(hour__gte=window.start, hour__lt=window.end,
                                       kind__in=(UNRESERVED, BORROWED), failed=False)
    if team_ids is not None:
        rows = rows.filter(Q(team_id__in=team_ids)
                           | Q(kind=BORROWED, reservation__team_id__in=team_ids))
    fields = ("hour", "kind", "team_id", "gpu_class_id", "rate_card_id", "split_ways",
              "reservation_id")
    return list(rows.values(*fields).annotate(busy_s=Sum("busy_s")).order_by())


def recent_use(*, window: Period, team_ids: list[int] | None = None) -> dict[int, RecentUse]:
    """Per team (or the given teams): the day-by-day charges and credits of `window` (whole
    hours, `RECENT_DAYS` days), priced as the statement prices them (accounting.md): the
    busy share at the on-demand or borrowed rate of the hour's card, the lender credited
    the reserved rate × the credit share. Seconds no card prices are left out (the draft
    to date names them)."""
    rows = _rows(window, team_ids)
    cards = RateCard.objects.in_bulk({row["rate_card_id"] for row in rows} - {None})
    lenders = dict(Reservation.objects.filter(
        id__in={row["reservation_id"] for row in rows if row["kind"] == BORROWED})
        .values_list("id", "team_id"))
    result: dict[int, RecentUse] = defaultdict(RecentUse)
    for row in rows:
        card = cards.get(row["rate_card_id"])
        if card is None:
            continue
        day = (window.end - row["hour"] - timedelta(hours=1)) // DAY
        hours = Fraction(row["busy_s"], row["split_ways"] * 3600)
        users = [(row["team_id"], "charges", "on_demand_rate" if row["kind"] == UNRESERVED
                  else "borrowed_rate")]
        if row["kind"] == BORROWED:
            users.append((lenders.get(row["reservation_id"]), "credits",
                          "lending_credit_rate"))
        for team_id, side, rate_attr in users:
            if team_id is None or (team_ids is not None and team_id not in team_ids):
                continue  # unattributed time is billed to nobody
            use = result[team_id]
            getattr(use, side)[day] += hours * Fraction(card_rate(card, rate_attr))
            use.currencies.add(card.currency)
            if side == "charges":
                use.hours.setdefault(row["gpu_class_id"], [Fraction(0)] * RECENT_DAYS)[day] \
                    += hours
    return dict(result)
