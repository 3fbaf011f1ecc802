"""Settings of the reports app, read at call time so tests and the demo can override them."""

import os
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.validators import validate_email


def settlement_delay() -> timedelta:
    """A month can be approved only this long after it ends, so late agent data is in
    (accounting.md, Closing a period; default 72 h, env GPUQUOTA_SETTLEMENT_DELAY_HOURS)."""
    default = os.environ.get("GPUQUOTA_SETTLEMENT_DELAY_HOURS") or "72"
    return timedelta(hours=float(getattr(settings, "SETTLEMENT_DELAY_HOURS", default)))


def draft_max_age() -> timedelta:
    """A draft older than this is recomputed when it is asked for (the API, the pages)."""
    default = os.environ.get("GPUQUOTA_STATEMENT_DRAFT_MAX_AGE_S") or "600"
    return timedelta(seconds=int(getattr(settings, "STATEMENT_DRAFT_MAX_AGE_S", default)))


def default_currency() -> str:
    """The currency of a statement with no priced line (only adjustments, or nothing)."""
    default = os.environ.get("GPUQUOTA_CURRENCY") or "USD"
    return str(getattr(settings, "STATEMENT_DEFAULT_CURRENCY", default))


def organisation_name() -> str:
    """Who issues the statements, on their PDF and mail (env GPUQUOTA_ORGANISATION_NAME)."""
    default = os.environ.get("GPUQUOTA_ORGANISATION_NAME") or "gpuquota"
    return str(getattr(settings, "ORGANISATION_NAME", default))


def finance_mailbox() -> str:
    """The organisation's finance mailbox, copied on every statement mail ("" for none;
    env GPUQUOTA_FINANCE_EMAIL)."""
    default = os.environ.get("GPUQUOTA_FINANCE_EMAIL") or ""
    value = str(getattr(settings, "FINANCE_EMAIL", default)).strip()
    try:
        validate_email(value)
    except ValidationError:
        return ""  # unset, or not an address: no copy (config check: docs/configuration.md)
    return value


def statement_number_prefix() -> str:
    """The statements' number prefix, e.g. GQ in GQ-2026-11-0007 (env
    GPUQUOTA_STATEMENT_NUMBER_PREFIX; letters and digits, at most 8)."""
    default = os.environ.get("GPUQUOTA_STATEMENT_NUMBER_PREFIX") or "GQ"
    value = str(getattr(settings, "STATEMENT_NUMBER_PREFIX", default))
    return value if value.isalnum() and len(value) <= 8 else "GQ"


def late_usage_scan_months() -> int:
    """How many approved months back the daily late-usage scan prices again (env
    GPUQUOTA_LATE_USAGE_MONTHS, default 12; the review page prices last month itself)."""
    default = os.environ.get("GPUQUOTA_LATE_USAGE_MONTHS") or "12"
    return int(getattr(settings, "LATE_USAGE_SCAN_MONTHS", default))


def statement_send_sweep_s() -> float:
    """How often beat looks for approved statements whose sending must be started again
    (env GPUQUOTA_STATEMENT_SEND_SWEEP_S, default 60)."""
    default = os.environ.get("GPUQUOTA_STATEMENT_SEND_SWEEP_S") or "60"
    return float(getattr(settings, "STATEMENT_SEND_SWEEP_S", default))


def statement_send_stale_s() -> int:
    """How long a sending may go without news before the sweep starts it again: an approval
    whose send never began (broker down, worker killed before it claimed a lead), or a lead
    claimed and never served (worker killed mid-send). Env GPUQUOTA_STATEMENT_SEND_STALE_S,
    default 120, past an SMTP conversation; a live sender asked twice sends nothing twice."""
    default = os.environ.get("GPUQUOTA_STATEMENT_SEND_STALE_S") or "120"
    return int(getattr(settings, "STATEMENT_SEND_STALE_S", default))


def lending_credit_share() -> Decimal:
    """The share of the reserved rate a lent GPU's reserving team is credited per borrowed
    busy second (accounting.md, Lending; env GPUQUOTA_LENDING_CREDIT_SHARE, default 0.5):
    a decimal from 0 to 1 with at most 4 places, so the credit's rate is exact."""
    raw = str(getattr(settings, "LENDING_CREDIT_SHARE", None)
              or os.environ.get("GPUQUOTA_LENDING_CREDIT_SHARE") or "0.5")
    try:
        share = Decimal(raw)
    except InvalidOperation:
        share = Decimal("NaN")
    if not share.is_finite() or not 0 <= share <= 1 or share != share.quantize(Decimal("0.0001")):
        raise ImproperlyConfigured(
            f"GPUQUOTA_LENDING_CREDIT_SHARE must be a decimal from 0 to 1 with at most 4 "
            f"places, not {raw!r}.")
    return share


def channel_allowed_networks_raw() -> str:
    """Networks a team's notification channel may reach although they are not public
    (`GPUQUOTA_CHANNEL_ALLOWED_NETWORKS`, comma-separated CIDRs; default none): a Slack or
    Teams URL is public; an in-house webhook receiver needs its network listed here."""
    default = os.environ.get("GPUQUOTA_CHANNEL_ALLOWED_NETWORKS") or ""
    return str(getattr(settings, "CHANNEL_ALLOWED_NETWORKS", default))
