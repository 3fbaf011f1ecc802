"""Settings of the mail module, read at call time so tests can override them."""

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
    """Seconds before the `mail.send` task tries again: 1, 2, 4... minutes, at most an hour."""
    return min(60 * 2**retries, 3600)
