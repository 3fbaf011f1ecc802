"""Channel URLs and signing secrets, encrypted at rest: an incoming-webhook URL is itself a
credential (whoever holds it may post), so it is sealed like a telemetry source's password,
with `OUTBOX_SECRET_KEY` (or a key derived from SECRET_KEY), and pages show only its host."""

import base64
import hashlib
import os
import secrets

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet() -> Fernet:
    material = (os.environ.get("GPUQUOTA_OUTBOX_SECRET_KEY")
                or getattr(settings, "OUTBOX_SECRET_KEY", "") or settings.SECRET_KEY).encode()
    key = base64.urlsafe_b64encode(hashlib.sha256(b"gpuquota-outbox:" + material).digest())
    return Fernet(key)


def seal(plain: str) -> str:
    """The ciphertext of `plain` ("" for "")."""
    return _fernet().encrypt(plain.encode()).decode() if plain else ""


def unseal(sealed: str) -> str:
    """The plain text, or "" when none was stored or the key changed since."""
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        return ""


def webhook_secret_new() -> str:
    """A Standard Webhooks signing secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
