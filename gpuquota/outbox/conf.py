"""Settings of the outbox, read at call time so tests can override them."""

import os

from django.conf import settings


def rollup_freshness_s() -> float:
    """An open GPU-hour's rollups lag its samples by at most this (USAGE_ROLLUP_FRESHNESS_S,
    default 300): its marks wait up to this long, so it is recomputed once per interval."""
    default = os.environ.get("USAGE_ROLLUP_FRESHNESS_S") or 300
    return float(getattr(settings, "USAGE_ROLLUP_FRESHNESS_S", default))


def rollup_final_delay_s() -> float:
    """A GPU-hour that has just closed is recomputed this long after its end
    (USAGE_ROLLUP_FINAL_DELAY_S, default 60), when its last windows have come in."""
    default = os.environ.get("USAGE_ROLLUP_FINAL_DELAY_S") or 60
    return float(getattr(settings, "USAGE_ROLLUP_FINAL_DELAY_S", default))


def dirty_sweep_interval_s() -> float:
    """How often beat sweeps the outbox (USAGE_DIRTY_SWEEP_INTERVAL_S, default 15): a mark
    is taken by the first sweep at or after its due time, up to this much later."""
    default = os.environ.get("USAGE_DIRTY_SWEEP_INTERVAL_S") or 15
    return float(getattr(settings, "USAGE_DIRTY_SWEEP_INTERVAL_S", default))


def dirty_sweep_budget_s() -> float:
    """How long one beat sweep may take (USAGE_DIRTY_SWEEP_BUDGET_S, default: the sweep
    interval; a longer sweep is logged, as the freshness bound then no longer holds)."""
    default = os.environ.get("USAGE_DIRTY_SWEEP_BUDGET_S") or dirty_sweep_interval_s()
    return float(getattr(settings, "USAGE_DIRTY_SWEEP_BUDGET_S", default))
