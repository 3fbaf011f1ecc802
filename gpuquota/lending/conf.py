"""Settings of lending (docs/lending.md), read at call time (tests and the demo override them)
from Django settings, else the environment, else the defaults below."""

import os

from django.conf import settings

#: A GPU idle this long (no busy second, no process of the reserving team) is lent.
#: Chosen with the lending simulation (bench/lending.py, docs/benchmarks.md): 600 s gains
#: at most 3.7 points of fleet busy share for 11 % more returns (owner jobs that wait).
DEFAULT_LEND_AFTER_IDLE_S = 1800
#: Borrowers are preempted within this many seconds of a return (accounting.md, Lending).
DEFAULT_LEND_RETURN_NOTICE_S = 300
#: The share of the idle window the samples must cover before a GPU is judged idle:
#: a GPU nobody reports on is never lent.
MIN_IDLE_COVERAGE = 0.9


def _value(name: str, default) -> str:
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name) or default
    return str(value)


def lending_enabled() -> bool:
    """The global switch (LENDING_ENABLED, default on): off, nothing new is lent."""
    return _value("LENDING_ENABLED", "1").strip().lower() not in ("0", "false", "no", "off", "")


def lend_after_idle_s() -> int:
    """LEND_AFTER_IDLE_S: how long an assigned GPU must be idle before it is lent."""
    return int(_value("LEND_AFTER_IDLE_S", DEFAULT_LEND_AFTER_IDLE_S))


def lend_return_notice_s() -> int:
    """LEND_RETURN_NOTICE_S: the notice within which the backend preempts borrowers."""
    return int(_value("LEND_RETURN_NOTICE_S", DEFAULT_LEND_RETURN_NOTICE_S))


def scan_interval_s() -> float:
    """LENDING_SCAN_INTERVAL_S: how often beat lends idle GPUs and ends due loans (60 s)."""
    return float(_value("LENDING_SCAN_INTERVAL_S", "60"))


def digest_interval_s() -> float:
    """LENDING_DIGEST_INTERVAL_S: how often borrowers' leads get the digest of preemptions
    (900 s): one mail per lead and run, never one per job."""
    return float(_value("LENDING_DIGEST_INTERVAL_S", "900"))
