"""Scheduler credentials (a slurmrestd or Kubernetes token) encrypted at rest with Fernet.

The plain text is needed to talk to the scheduler, so it cannot be hashed like our own
tokens; it is encrypted with a key that lives in the environment, never in the database,
and is never rendered on a page, in the API or in a log.
"""

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from gpuquota.schedulers import conf


def _fernet() -> Fernet:
    key = conf.credentials_key()
    if key:
        return Fernet(key.encode())
    digest = hashlib.sha256(b"gpuquota.schedulers.credentials:" + settings.SECRET_KEY.encode())
    return Fernet(base64.urlsafe_b64encode(digest.digest()))


def secret_encrypt(plain: str) -> str:
    """The stored form of a credential ("" stays "")."""
    return _fernet().encrypt(plain.encode()).decode() if plain else ""


def secret_decrypt(stored: str) -> str:
    """The credential back; ValueError when the key changed since it was stored."""
    if not stored:
        return ""
    try:
        return _fernet().decrypt(stored.encode()).decode()
    except InvalidToken as exc:
        raise ValueError("the stored credential cannot be decrypted with the current key: "
                         "enter it again") from exc
