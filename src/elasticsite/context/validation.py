"""What a node may say about itself: the checks behind the broker's payloads.

Every field a node sends ends up in other nodes' ``/etc/hosts``, ``ssh_known_hosts``
and firewall rules, through the administrator's scripts. So each is held to the
narrowest form its use allows, and refused (never repaired) otherwise:

- addresses are plain IPv4 or IPv6 addresses, without scope id, prefix or brackets,
  and neither unspecified nor multicast;
- host names are RFC 1123 names (letters, digits and inner hyphens, labels of 1 to
  63 characters, 253 in all), compared and stored in lower case;
- an SSH host key is one public key of an allowed type, parsed, written back as
  ``TYPE BASE64`` and a comment of plain words at most: no options, no markers
  such as ``@cert-authority``, no second key;
- free text holds no control characters (tabs and newlines included), so no field
  can add a line or a word where a script writes one.

The same functions serve the agent, which checks what the broker hands it before
any script sees it.
"""

from __future__ import annotations

import binascii
import ipaddress
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

__all__ = [
    "SSH_KEY_TYPES",
    "as_label",
    "check_address",
    "check_hostname",
    "check_short_hostname",
    "check_ssh_key",
    "check_text",
    "describe_errors",
    "has_control",
    "key_material",
    "short_of",
]

SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
"""Host key types a node may publish (DSA is obsolete, and security keys are not host keys)."""

MIN_RSA_BITS = 2048
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_COMMENT = re.compile(r"[A-Za-z0-9@._+:=/,~()#-]+(?: [A-Za-z0-9@._+:=/,~()#-]+)*")
"""A key comment: words of letters, digits and plain punctuation (no backslashes,
quotes or shell characters, which some script language might interpret)."""
_MAX_COMMENT = 256


def _shown(value: str) -> str:
    """A value, cut and with its control characters escaped, for an error message."""
    return repr(value[:60] + ("..." if len(value) > 60 else ""))


def has_control(value: str) -> bool:
    """Whether ``value`` holds a control, format or separator character other than
    the plain space (newlines, tabs, NUL, bidi overrides, line separators...)."""
    return any(
        ch != " " and unicodedata.category(ch)[0] in "CZ" for ch in value if not ch.isalnum()
    )


def check_text(value: str) -> str:
    """Free text: valid Unicode with no control characters."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no unpaired surrogates)") from None
    if has_control(value):
        raise ValueError("must not contain control characters (newlines, tabs, NUL ...)")
    return value


def check_hostname(value: str) -> str:
    """An RFC 1123 host name, in lower case."""
    name = value.lower()
    if not 0 < len(name) <= 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise ValueError(
            f"{_shown(value)} is not a host name (letters, digits and inner hyphens, "
            "dot-separated labels of 1-63 characters, 253 in all)"
        )
    return name


def check_short_hostname(value: str) -> str:
    """One RFC 1123 label, in lower case."""
    name = value.lower()
    if not _LABEL.fullmatch(name):
        raise ValueError(
            f"{_shown(value)} is not a short host name (one label: letters, digits and "
            "inner hyphens, 1-63 characters)"
        )
    return name


def as_label(name: str) -> str:
    """Any name (a worker id, a site id with '_' or '.') made one host-name label."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return label or "x"


def short_of(hostname: str) -> str:
    """The first label of a host name."""
    return hostname.partition(".")[0]


def check_address(value: str) -> str:
    """A plain IPv4 or IPv6 address of a host, in its canonical text form."""
    if not value or not all(ch in "0123456789abcdefABCDEF.:" for ch in value):
        raise ValueError(
            f"{_shown(value)} is not a plain IPv4 or IPv6 address (no scope id, prefix, "
            "brackets or spaces)"
        )
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{_shown(value)} is not an IPv4 or IPv6 address") from None
    if ip.is_unspecified or ip.is_multicast:
        raise ValueError(f"{value} is not a host's address (unspecified or multicast)")
    return str(ip)


def check_ssh_key(value: str) -> str:
    """One SSH public host key of an allowed type, as ``TYPE BASE64 [COMMENT]``."""
    if has_control(value):
        raise ValueError("must be one key on one line (no control characters)")
    parts = value.strip(" ").split(" ", 2)
    if len(parts) < 2:
        raise ValueError("must be 'TYPE BASE64 [COMMENT]', as in a .pub file")
    kind, blob = parts[0], parts[1]
    comment = parts[2].strip(" ") if len(parts) == 3 else ""
    if kind not in SSH_KEY_TYPES:
        raise ValueError(f"key type {_shown(kind)} is not one of {', '.join(SSH_KEY_TYPES)}")
    if not _BASE64.fullmatch(blob):
        raise ValueError("the key is not base64")
    if comment and (len(comment) > _MAX_COMMENT or not _COMMENT.fullmatch(comment)):
        raise ValueError(
            f"the key's comment must be words of letters, digits and @._+:=/,~()#-, "
            f"{_MAX_COMMENT} characters at most"
        )
    try:
        key = load_ssh_public_key(f"{kind} {blob}".encode())
    except (ValueError, UnsupportedAlgorithm, binascii.Error):
        raise ValueError(f"not a valid {kind} public key") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA host keys must have at least {MIN_RSA_BITS} bits")
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise ValueError(f"not a valid {kind} public key")
    return f"{kind} {blob}" + (f" {comment}" if comment else "")


def describe_errors(errors: Sequence[Mapping[str, Any]], *, skip: str = "") -> str:
    """``FIELD: reason`` for the first of pydantic's errors, ``(and N more)`` after it;
    ``skip`` is a location prefix to leave out (FastAPI's ``body``)."""
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != skip) or "record"
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}"


def key_material(value: str) -> str:
    """``TYPE BASE64`` of a checked key: what identifies a node, without its comment."""
    kind, blob, *_ = value.split(" ")
    return f"{kind} {blob}"
