"""Bearer secrets (API and node tokens): shown once, stored as a SHA-256 hash."""

import hashlib
import secrets
from dataclasses import dataclass


@dataclass(frozen=True)
class NewToken:
    key: str
    prefix: str
    key_hash: str


def token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_generate(kind: str) -> NewToken:
    """A fresh random token `gq<kind>_<43 chars>`; only its hash is ever stored."""
    key = f"gq{kind}_{secrets.token_urlsafe(32)}"
    return NewToken(key=key, prefix=key[:10], key_hash=token_hash(key))
