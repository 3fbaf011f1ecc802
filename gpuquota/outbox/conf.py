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
