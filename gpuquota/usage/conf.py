"""Settings of the usage app, read at call time so tests can override them."""

import os
from decimal import Decimal

from django.conf import settings

#: The longest sample window the protocol allows (agent-protocol.md: 1..600 s).
MAX_WINDOW_S = 600


def busy_util_percent() -> Decimal:
    """A covered second is busy when util_gpu_avg >= this (accounting.md, default 5)."""
    default = os.environ.get("BUSY_UTIL_PERCENT") or "5"
    return Decimal(str(getattr(settings, "BUSY_UTIL_PERCENT", default)))


def agent_silent_after_s() -> int:
    """A node whose agent has not reported for this long is shown as silent."""
    default = os.environ.get("AGENT_SILENT_AFTER_S") or 300
    return int(getattr(settings, "AGENT_SILENT_AFTER_S", default))


def dirty_sweep_batch() -> int:
    """GPU-hours one sweep recomputes at most (the next sweep takes the rest)."""
    default = os.environ.get("USAGE_DIRTY_SWEEP_BATCH") or 2000
    return int(getattr(settings, "USAGE_DIRTY_SWEEP_BATCH", default))


def metrics_token() -> str:
    """The bearer token Prometheus must send to /metrics (METRICS_TOKEN; empty: none)."""
    return str(getattr(settings, "METRICS_TOKEN", None) or os.environ.get("METRICS_TOKEN") or "")


def metrics_allowed_networks() -> list[str]:
    """Client networks that may scrape /metrics without a token (METRICS_ALLOWED_NETWORKS,
    comma-separated CIDRs). Default: loopback with DEBUG=1, none in production."""
    default = "127.0.0.0/8,::1/128" if settings.DEBUG else ""
    raw = getattr(settings, "METRICS_ALLOWED_NETWORKS", None)
    if raw is None:
        raw = os.environ.get("METRICS_ALLOWED_NETWORKS", default)
    if isinstance(raw, str):
        raw = raw.split(",")
    return [item.strip() for item in raw if item.strip()]
