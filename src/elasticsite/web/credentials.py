"""Credentials as the HTTP services take them: the Authorization header, digests, new secrets.

Secrets are kept and compared as SHA-256 digests (compare them with
:func:`hmac.compare_digest`); a failed check answers ``401`` with the scheme's
``WWW-Authenticate`` challenge.
"""

from __future__ import annotations

import base64
import hashlib
import secrets

__all__ = ["BASIC", "BEARER", "digest", "new_secret", "parse_authorization"]

BASIC = 'Basic realm="elasticsite"'
BEARER = 'Bearer realm="elasticsite"'


def digest(value: str) -> bytes:
    """The SHA-256 digest a secret is kept and compared as."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def new_secret() -> str:
    """192 random bits, URL-safe: keys, secrets and tokens."""
    return secrets.token_urlsafe(24)


def parse_authorization(header: str | None) -> tuple[str, str, str] | None:
    """``(scheme, user, secret)`` from an Authorization header (Basic or Bearer), or None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return "bearer", "", value.strip()
    if scheme != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except ValueError:  # not ASCII, not base64 (binascii.Error), not UTF-8 inside
        return None
    user, sep, secret = decoded.partition(":")
    return ("basic", user, secret) if sep else None
