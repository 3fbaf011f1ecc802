"""Settings of the mail module, read at call time so tests can override them."""

import os

from django.conf import settings


def mail_enabled() -> bool:
    """The global off switch (`GPUQUOTA_MAIL_ENABLED`, default on)."""
    return bool(getattr(settings, "MAIL_ENABLED", True))


def base_url() -> str:
    """Where links in mail point (`GPUQUOTA_BASE_URL`), without a trailing slash."""
    return str(getattr(settings, "GPUQUOTA_BASE_URL", "http://127.0.0.1:8000")).rstrip("/")


def message_id_domain() -> str:
    """The right-hand side of our Message-IDs: the sender address's domain."""
    sender = str(settings.DEFAULT_FROM_EMAIL)
    domain = sender.rsplit("@", 1)[-1].strip(" >") if "@" in sender else ""
    return domain or "gpuquota.localhost"


def retry_countdown_s(retries: int) -> int:
    """Seconds before a message is tried again after its `retries`-th failure (0 first):
    1, 2, 4... minutes, at most an hour."""
    return min(60 * 2**retries, 3600)


def max_attempts() -> int:
    """How many times a queued message is tried before it is given up
    (`GPUQUOTA_MAIL_MAX_ATTEMPTS`, default 10: about four hours of backoff)."""
    return int(getattr(settings, "MAIL_MAX_ATTEMPTS",
                       os.environ.get("GPUQUOTA_MAIL_MAX_ATTEMPTS") or 10))


def lease_s() -> int:
    """How long a sender holds the queued rows it took: a worker killed mid-send leaves
    them to the sweep after this (`GPUQUOTA_MAIL_LEASE_S`, default 900, past several SMTP
    timeouts)."""
    return int(getattr(settings, "MAIL_LEASE_S", os.environ.get("GPUQUOTA_MAIL_LEASE_S") or 900))


def sweep_interval_s() -> float:
    """How often beat runs `mail.send_due` (`GPUQUOTA_MAIL_SWEEP_INTERVAL_S`, default 60)."""
    return float(getattr(settings, "MAIL_SWEEP_INTERVAL_S",
                         os.environ.get("GPUQUOTA_MAIL_SWEEP_INTERVAL_S") or 60))
