"""A self-signed TLS certificate for the broker, made once in its state directory.

HTTPS is the default, and a broker must work out of the box: at first start it gets
an ECDSA P-256 key (written mode 0600) and a ten-year self-signed certificate naming
the host, ``localhost``, 127.0.0.1 and ::1. Clients pin that certificate (``--ca``,
or ``context_ca`` in a worker's user data), so it is also marked as its own CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import stat
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from elasticsite.files import private_dir

__all__ = ["CERT_FILE", "KEY_FILE", "ensure_certificate", "fingerprint"]

CERT_FILE = "broker.crt"
KEY_FILE = "broker.key"
_WILDCARDS = {"", "0.0.0.0", "::"}


def _names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    dns: list[str] = []
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    for host in [*hosts, socket.gethostname(), socket.getfqdn(), "localhost"]:
        if host in _WILDCARDS:
            continue
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            if host not in dns:
                dns.append(host)
            continue
        if ip not in ips:
            ips.append(ip)
    return [*(x509.DNSName(d) for d in dns), *(x509.IPAddress(i) for i in ips)]


def ensure_certificate(state_dir: Path, hosts: Iterable[str] = ()) -> tuple[Path, Path]:
    """Paths of the broker's certificate and key, generating both if either is missing.

    ``hosts`` are extra names or addresses the certificate must be valid for (the
    address the broker listens on, its public name).
    """
    cert_path, key_path = state_dir / CERT_FILE, state_dir / KEY_FILE
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    private_dir(state_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname() or "localhost"
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "elasticsite broker"),
            x509.NameAttribute(NameOID.COMMON_NAME, host[:64]),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_path.unlink(missing_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "wb") as f:
        f.write(key_bytes)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def fingerprint(cert_path: Path) -> str:
    """SHA-256 fingerprint of a PEM certificate, as colon-separated hex."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()
