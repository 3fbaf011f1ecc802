"""Drift (docs/reliability.md#drift): a class whose failure rate over one of the last
`RECENTS` (7, 14 or 28 days) is significantly above its own rate over the `BASE` days
before, or a node whose last 14 days are significantly above its class's other nodes over
the same days. The test is the conditional one (given both counts' sum, the recent count
is binomial with the recent share of exposure); flagged at `ALPHA` (divided by the windows
tried, for nodes also by the class's nodes) and when the recent rate is at least
`MIN_RATIO` times the other. A class's rate leaves out its lemons (the GPUs the lemon test
flags and the GPUs of the nodes it flags, as of the same instant): the lemon list names
them, and their bursts would hide or fake a change of the class as a whole."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuquota.reliability.history import History, fleet_history
from gpuquota.reliability.lemons import WINDOW, classes_of, lemons_from, units
from gpuquota.reliability.stats import rate_excess_p

RECENTS = (timedelta(days=7), timedelta(days=14), timedelta(days=28))
RECENT = timedelta(days=14)  # a node against its peers
BASE = timedelta(days=90)
ALPHA = 0.001
MIN_RATIO = 1.3
MIN_FAILURES = 3


@dataclass
class Drift:
    kind: str  # "class" (against its own past) | "node" (against its class's other nodes)
    key: str
    gpu_class: str
    recent_failures: int
    recent_rate_per_1000: float
    base_failures: int
    base_rate_per_1000: float
    p_value: float

    @property
    def ratio(self) -> float | None:
        return (self.recent_rate_per_1000 / self.base_rate_per_1000
                if self.base_rate_per_1000 else None)


def _rate(count: int, days: float) -> float:
    return round(1000 * count / days, 3) if days else 0.0


def _flag(k_recent, t_recent, k_base, t_base, alpha) -> tuple[bool, float]:
    p = rate_excess_p(k_recent=k_recent, t_recent=t_recent, k_base=k_base, t_base=t_base)
    base_rate = max(k_base, 1) / t_base if t_base else 0.0
    ratio_ok = t_recent > 0 and (k_recent / t_recent) >= MIN_RATIO * base_rate
    return (k_recent >= MIN_FAILURES and ratio_ok and p <= alpha), p


def _class_drift(name: str, klass, as_of: datetime) -> Drift | None:
    for recent in RECENTS:
        recent_start, base_start = as_of - recent, as_of - recent - BASE
        k_r, t_r = klass.totals(recent_start, as_of)
        k_b, t_b = klass.totals(base_start, recent_start)
        k_b -= sum(1 for t in klass.times if t == recent_start)  # [base, recent) half-open
        flagged, p = _flag(k_r, t_r, k_b, t_b, ALPHA / len(RECENTS))
        if flagged:
            return Drift("class", name, name, k_r, _rate(k_r, t_r), k_b, _rate(k_b, t_b), p)
    return None


def lemon_keys(history: History) -> set[str]:
    """The keys of the GPUs and nodes the lemon test flags as of the history's instant."""
    return {f.key for kind in ("gpu", "node") for f in lemons_from(history, kind=kind)}


def drift_from(history: History, *, lemons: set[str] | None = None) -> list[Drift]:
    """The drift flags as of the history's instant (`lemons`: the flagged GPUs' and nodes'
    keys, when the caller has them; else computed)."""
    as_of = history.as_of
    recent_start = as_of - RECENT
    lemons = lemon_keys(history) if lemons is None else lemons
    found = []
    for name, klass in sorted(classes_of(units(history, "gpu")).items()):
        steady = [u for u in klass.units if u.key not in lemons
                  and f"{u.gpus[0].cluster}/{u.gpus[0].hostname}" not in lemons]
        flag = _class_drift(name, classes_of(steady)[name], as_of) if steady else None
        if flag is not None:
            found.append(flag)
    for name, klass in sorted(classes_of(units(history, "node")).items()):
        k_all, t_all = klass.totals(recent_start, as_of)
        for node in klass.units:
            k_r, t_r = node.count(recent_start, as_of), node.days(recent_start, as_of)
            flagged, p = _flag(k_r, t_r, k_all - k_r, t_all - t_r, ALPHA / len(klass.units))
            if flagged:
                found.append(Drift("node", node.key, name, k_r, _rate(k_r, t_r), k_all - k_r,
                                   _rate(k_all - k_r, t_all - t_r), p))
    return found


def drift(*, as_of: datetime) -> list[Drift]:
    """The classes and nodes drifting as of `as_of`, from what was recorded by then."""
    return drift_from(fleet_history(as_of=as_of,
                                    since=as_of - max(2 * WINDOW, max(RECENTS) + BASE)))
