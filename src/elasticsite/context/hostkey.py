"""Proof that a node holds an SSH host *private* key: what replace-on-rejoin asks for.

Every member can read every other member's public host key, so presenting one proves
nothing. A join that would replace a member instead gets a challenge (a single-use
nonce, for one context and one host name); the node signs its message with the
private half of the host key it publishes, and the broker verifies the signature
with that public key. The message is, byte for byte::

    b"elasticsite-rejoin-v1\\0" + NONCE + b"\\0" + CONTEXT_ID + b"\\0" + HOSTNAME

(the three fields in ASCII: the nonce as the broker sent it, the context's id, the
host name in lower case). The prefix keeps the signature from meaning anything to
SSH or any other protocol the key serves. Signatures are those ``cryptography``
makes: Ed25519 (64 bytes); ECDSA over SHA-256/384/512 for nistp256/384/521, DER
encoded; RSA PKCS#1 v1.5 over SHA-256 (as ``rsa-sha2-256``). They travel in base64.

:func:`verify` serves the broker, :func:`sign_challenge` the agent.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Iterable
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from elasticsite.context.models import Challenge, HostKeyProof
from elasticsite.context.validation import key_material

__all__ = ["host_key_candidates", "message", "sign", "sign_challenge", "verify"]

log = logging.getLogger(__name__)

_PREFIX = b"elasticsite-rejoin-v1\0"
_HASHES: dict[int, hashes.HashAlgorithm] = {
    256: hashes.SHA256(),
    384: hashes.SHA384(),
    521: hashes.SHA512(),
}
_PRIVATE_FILES = ("ssh_host_ed25519_key", "ssh_host_ecdsa_key", "ssh_host_rsa_key")

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def message(nonce: str, context_id: str, hostname: str) -> bytes:
    """The bytes a node signs to answer a challenge (see the module's docstring)."""
    return b"\0".join(
        (_PREFIX + nonce.encode("ascii"), context_id.encode("ascii"), hostname.encode("ascii"))
    )


def sign(key: PrivateKey, data: bytes) -> bytes:
    """``data`` signed with an SSH host private key, in this module's scheme."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(_HASHES[key.curve.key_size]))
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def verify(ssh_public_key: str, data: bytes, signature_b64: str) -> bool:
    """Whether ``signature_b64`` signs ``data`` with the key of the (checked) public
    key line ``ssh_public_key``."""
    try:
        signature = base64.b64decode(signature_b64, validate=True)
        key = serialization.load_ssh_public_key(key_material(ssh_public_key).encode())
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            if key.curve.key_size not in _HASHES:
                return False
            key.verify(signature, data, ec.ECDSA(_HASHES[key.curve.key_size]))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        else:
            return False
    except (InvalidSignature, ValueError, binascii.Error, UnsupportedAlgorithm):
        return False
    return True


def host_key_candidates(root: Path, given: str | None = None) -> tuple[Path, ...]:
    """Where the private half of this node's host key may be: next to a ``.pub`` file
    given on the command line, then ``ROOT/etc/ssh/ssh_host_{ed25519,ecdsa,rsa}_key``."""
    found: list[Path] = []
    if given is not None and given.endswith(".pub") and Path(given).is_file():
        found.append(Path(given[: -len(".pub")]))
    found += [root / "etc" / "ssh" / name for name in _PRIVATE_FILES]
    return tuple(found)


def _load(path: Path) -> PrivateKey | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for loader in (serialization.load_ssh_private_key, serialization.load_pem_private_key):
        try:
            key = loader(data, None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
        if isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
            return key
        if isinstance(key, rsa.RSAPrivateKey):
            return key
    return None


def _public_line(key: PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def sign_challenge(
    challenge: Challenge, ssh_public_key: str, candidates: Iterable[Path]
) -> HostKeyProof | None:
    """The proof for ``challenge``, signed with the private key among ``candidates``
    whose public half is ``ssh_public_key``; None (and a warning) if none is readable."""
    wanted = key_material(ssh_public_key)
    paths = tuple(candidates)
    for path in paths:
        key = _load(path)
        if key is not None and key_material(_public_line(key)) == wanted:
            data = message(challenge.nonce, challenge.context_id, challenge.hostname)
            signature = base64.b64encode(sign(key, data)).decode()
            return HostKeyProof(nonce=challenge.nonce, signature=signature)
    log.warning(
        "cannot prove this node holds its SSH host key: no readable private key matching "
        "it among %s",
        ", ".join(str(p) for p in paths) or "no files",
    )
    return None
