"""A source's secret (password or bearer token): encrypted at rest, never shown again.

gpuquota must send it, so it cannot be hashed as node tokens are; it is encrypted with
TELEMETRY_SECRET_KEY (or a key derived from SECRET_KEY), and pages, the API, the audit
log and the logs only ever show its first characters."""

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from gpuquota.telemetry import conf

PREFIX_CHARS = 4


def _fernet() -> Fernet:
    material = (conf.SECRET_KEY or settings.SECRET_KEY).encode()
    key = base64.urlsafe_b64encode(hashlib.sha256(b"gpuquota-telemetry:" + material).digest())
    return Fernet(key)


def secret_seal(plain: str) -> tuple[str, str]:
    """(ciphertext, the prefix shown in pages) of a secret; ("", "") for none."""
    if not plain:
        return "", ""
    return _fernet().encrypt(plain.encode()).decode(), plain[:PREFIX_CHARS]


def secret_open(sealed: str) -> str:
    """The plain secret, or "" when none was stored or the key changed since."""
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return ""
