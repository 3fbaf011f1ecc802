"""Settings of the reclaim policy, read at call time (tests and the demo override
them) from Django settings, else the environment, else the defaults of accounting.md."""

import os
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _value(name: str, default: str) -> str:
    value = getattr(settings, name, None)  # a setting of 0 is a value, not "unset"
    return str(value if value not in (None, "") else os.environ.get(name) or default)


SPEC, EVIDENCE, GUARDED = "spec", "evidence", "guarded"
RULES = (SPEC, EVIDENCE, GUARDED)
#: The guarded rule's history gate: days of samples a team needs of a GPU class before any
#: of its GPUs of that class is hard-reclaimed. Chosen with the lending simulation and the
#: backtest (docs/reclaim.md, "The history gate").
DEFAULT_HISTORY_DAYS = 5


@dataclass(frozen=True)
class Policy:
    """The thresholds one evaluation (or one backtest) applies. `rule` = "spec": a GPU
    is idle over `lookback` (accounting.md). "evidence": also idle after the shorter
    `empty_lookback` when it held no process and at most `empty_memory_bytes` all that
    time (a job that finished), while one holding memory or a process (a notebook
    kernel) is idle only over the longer `held_lookback` (docs/reclaim.md). "guarded"
    (the default; hard reclaim that survives a realistic mix): idle over `lookback` only when two
    signals agree, no process and at most `empty_memory_bytes` held AND no busy second,
    and never against the team's recurring use (`pattern_*`) nor in a failed job's
    debugging gap (`retry_*`): `reclaim/guards.py`; and not before the team has
    `history_days` days of samples of the class for those guards to learn from, nor on a
    GPU lent now."""

    lookback: timedelta
    idle_busy_fraction: Decimal
    min_coverage: Decimal
    grace: timedelta
    snooze: timedelta
    percentile: int = 95
    slot_s: int = 60
    slot_busy_s: int = 30
    rule: str = GUARDED
    empty_lookback: timedelta = timedelta(hours=8)
    held_lookback: timedelta = timedelta(hours=24)
    empty_memory_bytes: int = 2**30
    pattern_weeks: int = 4
    pattern_min_weeks: int = 2
    pattern_days: int = 7
    pattern_min_days: int = 3
    retry_window: timedelta = timedelta(days=7)
    retry_short_run: timedelta = timedelta(hours=24)
    gap_factor: Decimal = Decimal(2)
    history_days: int = DEFAULT_HISTORY_DAYS

    @property
    def lookbacks(self) -> list[timedelta]:
        """The windows this policy judges over, shortest first."""
        if self.rule in (SPEC, GUARDED):
            return [self.lookback]
        return sorted({self.empty_lookback, self.lookback, self.held_lookback})

    @property
    def shortest(self) -> timedelta:
        return self.lookbacks[0]

    def override(self, **changes) -> "Policy":
        """The same policy with some thresholds changed (a backtest's what-if)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def policy() -> Policy:
    """The policy in force: RECLAIM_LOOKBACK_S (24 h), RECLAIM_IDLE_BUSY_FRACTION (0.10),
    RECLAIM_MIN_COVERAGE (0.8), RECLAIM_GRACE_S (4 h), RECLAIM_SNOOZE_S (7 days);
    RECLAIM_RULE (guarded, spec or evidence), RECLAIM_EMPTY_LOOKBACK_S (8 h),
    RECLAIM_HELD_LOOKBACK_S (24 h), RECLAIM_EMPTY_MEMORY_BYTES (1 GiB); the guarded
    rule's RECLAIM_PATTERN_WEEKS (4), RECLAIM_PATTERN_MIN_WEEKS (2),
    RECLAIM_PATTERN_DAYS (7), RECLAIM_PATTERN_MIN_DAYS (3), RECLAIM_RETRY_WINDOW_S
    (7 days), RECLAIM_RETRY_SHORT_RUN_S (24 h), RECLAIM_GAP_FACTOR (2) and its history gate,
    RECLAIM_HISTORY_DAYS (DEFAULT_HISTORY_DAYS)."""
    rule = _value("RECLAIM_RULE", GUARDED)
    if rule not in RULES:
        raise ImproperlyConfigured(f"RECLAIM_RULE is {rule!r}: one of {', '.join(RULES)}.")
    return Policy(
        rule=rule,
        empty_lookback=timedelta(seconds=int(_value("RECLAIM_EMPTY_LOOKBACK_S", "28800"))),
        held_lookback=timedelta(seconds=int(_value("RECLAIM_HELD_LOOKBACK_S", "86400"))),
        empty_memory_bytes=int(_value("RECLAIM_EMPTY_MEMORY_BYTES", str(2**30))),
        lookback=timedelta(seconds=int(_value("RECLAIM_LOOKBACK_S", "86400"))),
        idle_busy_fraction=Decimal(_value("RECLAIM_IDLE_BUSY_FRACTION", "0.10")),
        min_coverage=Decimal(_value("RECLAIM_MIN_COVERAGE", "0.8")),
        grace=timedelta(seconds=int(_value("RECLAIM_GRACE_S", "14400"))),
        snooze=timedelta(seconds=int(_value("RECLAIM_SNOOZE_S", str(7 * 86400)))),
        **_guards(),
    )


def _guards() -> dict:
    found = {
        "pattern_weeks": int(_value("RECLAIM_PATTERN_WEEKS", "4")),
        "pattern_min_weeks": int(_value("RECLAIM_PATTERN_MIN_WEEKS", "2")),
        "pattern_days": int(_value("RECLAIM_PATTERN_DAYS", "7")),
        "pattern_min_days": int(_value("RECLAIM_PATTERN_MIN_DAYS", "3")),
        "retry_window": timedelta(seconds=int(_value("RECLAIM_RETRY_WINDOW_S", "604800"))),
        "retry_short_run": timedelta(seconds=int(_value("RECLAIM_RETRY_SHORT_RUN_S", "86400"))),
        "gap_factor": Decimal(_value("RECLAIM_GAP_FACTOR", "2")),
        "history_days": int(_value("RECLAIM_HISTORY_DAYS", str(DEFAULT_HISTORY_DAYS))),
    }
    if not 1 <= found["pattern_min_weeks"] <= found["pattern_weeks"]:
        raise ImproperlyConfigured("RECLAIM_PATTERN_MIN_WEEKS must be between 1 and "
                                   "RECLAIM_PATTERN_WEEKS.")
    if not 1 <= found["pattern_min_days"] <= found["pattern_days"]:
        raise ImproperlyConfigured("RECLAIM_PATTERN_MIN_DAYS must be between 1 and "
                                   "RECLAIM_PATTERN_DAYS.")
    longest = max(7 * found["pattern_weeks"], found["pattern_days"],
                  found["retry_window"].days)
    if not 0 <= found["history_days"] <= longest:
        raise ImproperlyConfigured(f"RECLAIM_HISTORY_DAYS must be between 0 and {longest} "
                                   "(the guards' look-back, in days).")
    return found


def evaluate_interval_s() -> float:
    """How often beat runs the evaluation (RECLAIM_EVALUATE_INTERVAL_S, hourly)."""
    return float(_value("RECLAIM_EVALUATE_INTERVAL_S", "3600"))


def release_interval_s() -> float:
    """How often beat releases recommendations whose grace ended (RECLAIM_RELEASE_INTERVAL_S)."""
    return float(_value("RECLAIM_RELEASE_INTERVAL_S", "180"))


def grace_busy_s() -> int:
    """A GPU busy this long during the grace period (in slots of at least 30 busy
    seconds) is in use again: its release is skipped (RECLAIM_GRACE_BUSY_S, 60)."""
    return int(_value("RECLAIM_GRACE_BUSY_S", "60"))
