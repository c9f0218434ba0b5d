"""What a node may say about itself: the checks behind the broker's payloads.

Every field a node sends ends up in other nodes' ``/etc/hosts``, ``ssh_known_hosts``
and firewall rules, through the administrator's scripts. So each is held to the
narrowest form its use allows, and refused (never repaired) otherwise:

- addresses are plain IPv4 or IPv6 addresses, without scope id, prefix or brackets,
  kept in one canonical form (an IPv4-mapped IPv6 address is its IPv4 address, IPv6
  in its compressed lower-case form), and never a host's impossible addresses
  (unspecified, ``0.0.0.0/8``, multicast, the broadcast ``255.255.255.255``);
  whether loopback and link-local addresses are welcome is each context's choice
  (:func:`local_scope`);
- host names are RFC 1123 names (letters, digits and inner hyphens, labels of 1 to
  63 characters, 253 in all), compared and stored in lower case, and never an IP
  literal in any notation: no label reads as a number (see :func:`numeric_label`),
  so neither ``10.0.0.1``, ``127.1``, ``0x7f.1`` nor ``4294967295`` is a name, and
  IPv6 literals hold colons, which no name does;
- an SSH host key is one public key of an allowed type, parsed, written back as
  ``TYPE BASE64`` and at most one short comment field (no space): no options, no
  markers such as ``@cert-authority``, no second key;
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

__all__ = [
    "SSH_KEY_TYPES",
    "as_label",
    "canonical_address",
    "check_address",
    "check_hostname",
    "check_short_hostname",
    "check_ssh_key",
    "check_text",
    "describe_errors",
    "has_control",
    "key_material",
    "local_scope",
    "numeric_label",
    "publishable_key",
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
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*(?:p-?[0-9]+)?|[0-9]+e-?[0-9]+|inf|infinity|nan")
"""Labels that C's inet_aton/strtol/strtod, awk or Python read as a number."""
_COMMENT = re.compile(r"[A-Za-z0-9@._+:=/-]{1,64}")
"""A key comment: one field of letters, digits and plain punctuation, 64 at most
(no space, backslash, quote or shell character, which some script might read)."""


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


def numeric_label(label: str) -> bool:
    """Whether a (lower-case) label reads as a number somewhere a name goes: decimal
    or octal digits (``10``, ``010``, ``4294967295``), hexadecimal (``0x64``, as
    inet_aton and strtol read it, hex floats ``0x1p3`` too), exponent forms (``1e2``,
    ``1e-2``; ``-`` is the only sign a label can hold) and ``inf``/``infinity``/``nan``
    (strtod, awk and Python floats). A name with such a label could alias an address
    (``127.1``, ``0x7f.1``) or another name (awk compares ``100`` and ``1e2`` equal)."""
    return _NUMERIC_LABEL.fullmatch(label) is not None


def _numeric_error(value: str, label: str) -> ValueError:
    return ValueError(
        f"{_shown(value)} is not a host name: its label {label!r} reads as a number "
        "(an IP literal or a number in some notation)"
    )


def check_hostname(value: str) -> str:
    """An RFC 1123 host name, in lower case, no label of which reads as a number."""
    name = value.lower()
    labels = name.split(".")
    if not 0 < len(name) <= 253 or not all(_LABEL.fullmatch(p) for p in labels):
        raise ValueError(
            f"{_shown(value)} is not a host name (letters, digits and inner hyphens, "
            "dot-separated labels of 1-63 characters, 253 in all)"
        )
    for label in labels:
        if numeric_label(label):
            raise _numeric_error(value, label)
    return name


def check_short_hostname(value: str) -> str:
    """One RFC 1123 label, in lower case, that does not read as a number."""
    name = value.lower()
    if not _LABEL.fullmatch(name):
        raise ValueError(
            f"{_shown(value)} is not a short host name (one label: letters, digits and "
            "inner hyphens, 1-63 characters)"
        )
    if numeric_label(name):
        raise _numeric_error(value, name)
    return name


def as_label(name: str) -> str:
    """Any name (a worker id, a site id with '_' or '.') made one host-name label
    that does not read as a number."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    if not label or numeric_label(label):
        label = ("n-" + label)[:63].strip("-")
    return label


def short_of(hostname: str) -> str:
    """The first label of a host name."""
    return hostname.partition(".")[0]


def _parse_address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A plain address (no scope id, prefix, brackets), IPv4-mapped IPv6 as IPv4."""
    if not value or not all(ch in "0123456789abcdefABCDEF.:" for ch in value):
        raise ValueError(
            f"{_shown(value)} is not a plain IPv4 or IPv6 address (no scope id, prefix, "
            "brackets or spaces)"
        )
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{_shown(value)} is not an IPv4 or IPv6 address") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def check_address(value: str) -> str:
    """A plain IPv4 or IPv6 address a host could have, in its canonical text form:
    an IPv4-mapped IPv6 address (``::ffff:10.0.0.5``) is its IPv4 address, IPv6 is
    compressed and in lower case."""
    ip = _parse_address(value)
    if ip.is_unspecified or ip.is_multicast or ip == _BROADCAST or ip in _THIS_NETWORK:
        raise ValueError(
            f"{_shown(value)} is not a host's address (unspecified, this-network, "
            "multicast or broadcast)"
        )
    return str(ip)


def canonical_address(value: str | None) -> str | None:
    """``value`` in the canonical form :func:`check_address` gives, or None if it is
    not a plain address (a peer's address, a record kept by an older broker)."""
    try:
        return str(_parse_address(value or ""))
    except ValueError:
        return None


def local_scope(address: str) -> str | None:
    """``"loopback"`` or ``"link-local"`` for such a (canonical) address, else None:
    addresses that only make sense on one host or one link, which a context takes
    only when it allows them."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    return None


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
    if comment and not _COMMENT.fullmatch(comment):
        raise ValueError(
            "the key's comment must be one field of letters, digits and @._+:=/- "
            "(no space), 64 characters at most; drop it or shorten it"
        )
    # Here, not at the top: the local cloud's workers import this module for its
    # labels, and hundreds start at once on a small machine.
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    try:
        key = load_ssh_public_key(f"{kind} {blob}".encode())
    except (ValueError, UnsupportedAlgorithm, binascii.Error):
        raise ValueError(f"not a valid {kind} public key") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA host keys must have at least {MIN_RSA_BITS} bits")
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise ValueError(f"not a valid {kind} public key")
    return f"{kind} {blob}" + (f" {comment}" if comment else "")


def publishable_key(line: str) -> str:
    """A public key line with its comment dropped when the broker would refuse that
    comment (it must be one short field): the comment means nothing to other nodes."""
    line = line.strip()
    kind, _, rest = line.partition(" ")
    blob, _, comment = rest.strip(" ").partition(" ")
    if comment:
        try:
            check_ssh_key(line)
        except ValueError:
            return f"{kind} {blob}"
    return line


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
