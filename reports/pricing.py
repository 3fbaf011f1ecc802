"""Statement figures (accounting.md, Chargeback): a team's lines for a month priced from
the usage layer's chargeable seconds, one line per kind, class and rate, each amount one
`ROUND_HALF_UP` division of an exact numerator (on-demand shares stay `Fraction`s until
then). Reads only, for all teams at once in a bounded number of queries; the statement
services store what it returns."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from gpuquota.core.timeutil import Period
from gpuquota.inventory.models import GpuClass
from gpuquota.rates.models import RateCard
from gpuquota.usage.figures import sums_by
from gpuquota.usage.lent import lent_seconds
from gpuquota.usage.pricing import chargeable_seconds, rate_card_gaps
from gpuquota.usage.rollup import RESERVED
from gpuquota.usage.selectors import reserved_qs, seconds_total, usage_rows
from reports import conf
from reports.models import Adjustment, StatementLine

Kind = StatementLine.Kind
CENT = Decimal("0.01")
KIND_ORDER = [Kind.RESERVED, Kind.FAILURE_CREDIT, Kind.ON_DEMAND, Kind.BORROWED,
              Kind.LENDING_CREDIT, Kind.ADJUSTMENT]


def round_half_up_int(value: Fraction) -> int:
    """`value` rounded half away from zero to an integer, exactly."""
    value = Fraction(value)
    numerator, denominator = abs(value.numerator), value.denominator
    whole = (2 * numerator + denominator) // (2 * denominator)
    return -whole if value < 0 else whole


def round_half_up_cents(value: Fraction) -> Decimal:
    """`value` rounded half away from zero to 0.01, exactly (no binary or decimal
    intermediate)."""
    return Decimal(round_half_up_int(Fraction(value) * 100)).scaleb(-2).quantize(CENT)


def line_amount(gpu_seconds_x_rate: Fraction) -> Decimal:
    """The amount of a line: ROUND_HALF_UP(Σ seconds × rate / 3600, 0.01)."""
    return round_half_up_cents(Fraction(gpu_seconds_x_rate) / 3600)


def utc_label(instant: datetime) -> str:
    return f"{instant:%Y-%m-%d %H:%M}Z" if instant.second == 0 else f"{instant:%Y-%m-%d %H:%M:%S}Z"


@dataclass
class DraftLine:
    """A line as computed (not stored): `currency` is None for adjustments."""

    kind: str
    amount: Decimal
    gpu_class_id: int | None = None
    gpu_class_name: str = ""
    seconds: int | None = None
    rate: Decimal | None = None
    currency: str | None = None
    reason: str = ""
    adjustment_id: int | None = None
    first_from: datetime | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple:
        """What identifies a line across two computations of one month."""
        return (self.kind, self.gpu_class_id, self.rate, self.adjustment_id)


@dataclass
class TeamDraft:
    """One team's month as it stands: lines, total, currency, utilization and lent seconds,
    and the reasons it cannot be approved (`errors`, empty when it can)."""

    team_id: int
    lines: list[DraftLine] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reserved_s: int = 0
    covered_s: int = 0
    busy_s: int = 0
    lent_s: int = 0
    lent_busy_s: int = 0

    @property
    def total(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))

    @property
    def currency(self) -> str:
        currencies = {line.currency for line in self.lines if line.currency}
        return currencies.pop() if len(currencies) == 1 else conf.default_currency()

    @property
    def has_activity(self) -> bool:
        return bool(self.lines or self.errors or self.reserved_s)


@dataclass
class _Group:
    numerator: Fraction = Fraction(0)  # Σ seconds × rate, exact
    seconds: Fraction = Fraction(0)
    first_from: datetime | None = None


def card_rate(card: RateCard, rate_attr: str) -> Decimal:
    """A card's rate for a kind of line; the lending credit's is the reserved rate times
    the credit share (exact: 8 places at most)."""
    if rate_attr == "lending_credit_rate":
        return card.reserved_rate * conf.lending_credit_share()
    return getattr(card, rate_attr)


def _priced_lines(kind: str, rows: list[dict], seconds_key: str, rate_attr: str,
                  cards: dict, sign: int) -> tuple[list[DraftLine], dict[int, int]]:
    """Lines of one kind from chargeable rows (grouped by class, rate and currency), and
    the seconds per class that no rate card prices."""
    groups: dict[tuple, _Group] = defaultdict(_Group)
    missing: dict[int, Fraction] = defaultdict(Fraction)
    for row in rows:
        seconds = Fraction(row[seconds_key], row.get("split_ways", 1))
        card = cards.get(row["rate_card_id"])
        if card is None:
            missing[row["gpu_class_id"]] += seconds
            continue
        rate = card_rate(card, rate_attr)
        group = groups[(row["gpu_class_id"], rate, card.currency)]
        group.numerator += seconds * Fraction(rate)
        group.seconds += seconds
        if group.first_from is None or card.valid_from < group.first_from:
            group.first_from = card.valid_from
    lines = []
    for (class_id, rate, currency), group in groups.items():
        seconds = round_half_up_int(group.seconds)
        if seconds == 0:
            continue  # a share too small to show a second (and a cent)
        lines.append(DraftLine(kind=kind, gpu_class_id=class_id, seconds=seconds, rate=rate,
                               currency=currency, amount=line_amount(sign * group.numerator),
                               first_from=group.first_from))
    return lines, missing


def _gap_error(class_name: str, gaps: list[tuple[datetime, datetime]], kind_label: str,
               seconds: Fraction, period: Period) -> str:
    where = ", ".join(f"from {utc_label(a)} to {utc_label(b)}" for a, b in gaps) or \
        f"in {period.start:%Y-%m}"
    return (f"No rate card for {class_name} {where}: {round_half_up_int(seconds)} s of "
            f"{kind_label} cannot be priced.")


def _utilization(period: Period, team_ids: list[int] | None) -> dict[int, tuple[int, int, int]]:
    """(reserved_s, covered_s, busy_s) per team: reserved time and what agents reported
    in it, failed time included (as the team page shows it)."""
    filters = {"reservation__team_id__in": team_ids} if team_ids is not None else {}
    reserved = seconds_total(reserved_qs(period, **filters), "reservation__team_id")
    if team_ids is not None and len(team_ids) == 1:
        rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None, kind=RESERVED,
                          team_id=team_ids[0])
    else:
        rows = usage_rows(period=period, edge_gpu_ids=lambda s, e: None, kind=RESERVED)
    sums = sums_by(rows, lambda r: r["team_id"])
    ids = set(reserved) | set(sums)
    return {
        team_id: (reserved.get(team_id, 0), round_half_up_int(sums[team_id].covered_s),
                  round_half_up_int(sums[team_id].busy_s))
        for team_id in ids if team_ids is None or team_id in team_ids
    }


def _lending(period: Period, team_ids: list[int] | None, borrowed: list[dict]
             ) -> dict[int, tuple[int, int]]:
    """(lent_s, lent_busy_s) per lending team: its loans' non-failed seconds, and the
    borrowed busy seconds on its lent GPUs, attributed or not (the lending credit's)."""
    filters = {"assignment__reservation__team_id__in": team_ids} if team_ids is not None else {}
    lent = lent_seconds(period=period, group="assignment__reservation__team_id", **filters)
    busy: dict[int, Fraction] = defaultdict(Fraction)
    for row in borrowed:
        busy[row["lender_id"]] += Fraction(row["busy_s"], row.get("split_ways", 1))
    return {team_id: (lent.get(team_id, 0), round_half_up_int(busy.get(team_id, 0)))
            for team_id in set(lent) | set(busy)
            if team_ids is None or team_id in team_ids}


def team_drafts(*, period: Period, month: date, team_ids: list[int] | None = None
                ) -> dict[int, TeamDraft]:
    """Every team's (or the given teams') figures for `period` (a month, or the current
    month to date), with the adjustments of `month`; teams with nothing are left out."""
    chargeable = chargeable_seconds(period=period, team_ids=team_ids)
    rows = [*chargeable.reserved, *chargeable.failed_reserved, *chargeable.on_demand,
            *chargeable.borrowed]
    cards = RateCard.objects.in_bulk({r["rate_card_id"] for r in rows if r["rate_card_id"]})
    names = dict(GpuClass.objects.filter(id__in={r["gpu_class_id"] for r in rows})
                 .values_list("id", "name"))
    adjustments = Adjustment.objects.filter(month=month).order_by("created_at", "id")
    if team_ids is not None:
        adjustments = adjustments.filter(team_id__in=team_ids)

    by_team: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for kind, kind_rows in ((Kind.RESERVED, chargeable.reserved),
                            (Kind.FAILURE_CREDIT, chargeable.failed_reserved),
                            (Kind.ON_DEMAND, chargeable.on_demand)):
        for row in kind_rows:
            if row["team_id"] is not None:  # unattributed on-demand time is billed to nobody
                by_team[row["team_id"]][kind].append(row)
    for row in chargeable.borrowed:
        if row["team_id"] is not None:  # unattributed borrowed time is billed to nobody
            by_team[row["team_id"]][Kind.BORROWED].append(row)
        # the lender is credited for every borrowed second, attributed or not
        by_team[row["lender_id"]][Kind.LENDING_CREDIT].append(row)
    if team_ids is not None:
        by_team = {team: kinds for team, kinds in by_team.items() if team in team_ids}

    drafts: dict[int, TeamDraft] = {}
    for team_id, (reserved_s, covered_s, busy_s) in _utilization(period, team_ids).items():
        drafts[team_id] = TeamDraft(team_id, reserved_s=reserved_s, covered_s=covered_s,
                                    busy_s=busy_s)
    for team_id, (lent_s, lent_busy_s) in _lending(period, team_ids,
                                                   chargeable.borrowed).items():
        draft = drafts.setdefault(team_id, TeamDraft(team_id))
        draft.lent_s, draft.lent_busy_s = lent_s, lent_busy_s
    missing = {team_id: _price_team(drafts.setdefault(team_id, TeamDraft(team_id)), kinds,
                                    cards, names) for team_id, kinds in by_team.items()}
    # the periods no rate card covers, read once for every team's unpriced classes
    gaps = rate_card_gaps(gpu_class_ids={class_id for by_class in missing.values()
                                         for class_id in by_class}, period=period)
    for team_id, by_class in missing.items():
        _gap_errors(drafts[team_id], by_class, gaps, names, period)
    for adjustment in adjustments:
        drafts.setdefault(adjustment.team_id, TeamDraft(adjustment.team_id)).lines.append(
            DraftLine(kind=Kind.ADJUSTMENT, amount=adjustment.amount, reason=adjustment.reason,
                      adjustment_id=adjustment.id))
    for draft in drafts.values():
        _check_currencies(draft)
    return drafts


_SPECS = {  # kind: (seconds field, rate field, sign, what the seconds are)
    Kind.RESERVED: ("seconds", "reserved_rate", 1, "reserved time"),
    Kind.FAILURE_CREDIT: ("seconds", "reserved_rate", -1, "failed reserved time"),
    Kind.ON_DEMAND: ("busy_s", "on_demand_rate", 1, "on-demand time"),
    Kind.BORROWED: ("busy_s", "borrowed_rate", 1, "borrowed time"),
    Kind.LENDING_CREDIT: ("busy_s", "lending_credit_rate", -1, "lent busy time"),
}
_PRICED = [kind for kind in KIND_ORDER if kind in _SPECS]


def _price_team(draft: TeamDraft, kinds: dict, cards: dict, names: dict
                ) -> dict[int, list[tuple[str, Fraction]]]:
    """The draft's priced lines; returns the seconds no rate card prices, per class."""
    missing_by_class: dict[int, list[tuple[str, Fraction]]] = defaultdict(list)
    for kind in _PRICED:
        seconds_key, rate_attr, sign, label = _SPECS[kind]
        lines, missing = _priced_lines(kind, kinds.get(kind, []), seconds_key, rate_attr,
                                       cards, sign)
        for line in lines:
            line.gpu_class_name = names.get(line.gpu_class_id, "")
        lines.sort(key=lambda line: (line.gpu_class_name, line.first_from))
        draft.lines += lines
        # failed seconds are inside the reserved ones; lent ones inside the borrowed ones
        if kind not in (Kind.FAILURE_CREDIT, Kind.LENDING_CREDIT):
            for class_id, seconds in missing.items():
                missing_by_class[class_id].append((label, seconds))
    return missing_by_class


def _gap_errors(draft: TeamDraft, missing_by_class: dict, gaps: dict, names: dict,
                period: Period) -> None:
    for class_id, items in sorted(missing_by_class.items(), key=lambda i: names.get(i[0], "")):
        for label, seconds in items:
            draft.errors.append(_gap_error(names.get(class_id, str(class_id)), gaps[class_id],
                                           label, seconds, period))


def _check_currencies(draft: TeamDraft) -> None:
    by_currency: dict[str, set] = defaultdict(set)
    for line in draft.lines:
        if line.currency:
            by_currency[line.currency].add(line.gpu_class_name)
    if len(by_currency) > 1:
        named = ", ".join(f"{currency} ({', '.join(sorted(classes))})"
                          for currency, classes in sorted(by_currency.items()))
        draft.errors.append(f"Lines would mix currencies: {named}; a statement has one "
                            "currency.")
