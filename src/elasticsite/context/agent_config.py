"""The agent's configuration: which context it joins, who this node is, how it runs.

:func:`load_userdata` reads the context's coordinates from the instance's user data;
:func:`discover_identity` finds this node's record (names, the address peers reach
it at, its SSH public host key), each field overridable, and checks it as the broker
will (:func:`checked_identity`), so a record the broker would refuse is reported
before any request; :func:`configure` builds the :class:`AgentSettings` the CLI runs.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ValidationError

from elasticsite.context.agent_state import AgentError
from elasticsite.context.applying import DEFAULT_SCRIPTS
from elasticsite.context.hostkey import host_key_candidates
from elasticsite.context.models import NodeIn
from elasticsite.context.validation import describe_errors, publishable_key

__all__ = [
    "SSH_KEY_FILES",
    "USERDATA_ENV",
    "AgentSettings",
    "ContextRef",
    "Identity",
    "checked_identity",
    "configure",
    "discover_identity",
    "load_userdata",
    "read_ssh_key",
]

USERDATA_ENV = "ELASTICSITE_USERDATA"
SSH_KEY_FILES = ("ssh_host_ed25519_key.pub", "ssh_host_ecdsa_key.pub", "ssh_host_rsa_key.pub")


@dataclass(frozen=True)
class ContextRef:
    """Which context to join and how to reach it (never logged: holds the secret)."""

    uri: str
    key: str
    secret: str = field(repr=False)
    ca_pem: str | None = field(default=None, repr=False)


def load_userdata(path: Path) -> ContextRef:
    """Read the context from a user data JSON file (keys of docs/recontext-api.md)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentError(f"cannot read user data {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AgentError(f"user data {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise AgentError(f"user data {path} must be a JSON object")
    missing = [k for k in ("context_uri", "context_key", "context_secret") if not raw.get(k)]
    if missing:
        raise AgentError(f"user data {path} lacks {', '.join(missing)}")
    bad = [k for k in ("context_uri", "context_key", "context_secret", "context_ca")
           if k in raw and not isinstance(raw[k], str)]  # fmt: skip
    if bad:
        raise AgentError(f"user data {path}: {', '.join(bad)} must be strings")
    return ContextRef(
        raw["context_uri"], raw["context_key"], raw["context_secret"], raw.get("context_ca")
    )


@dataclass(frozen=True)
class Identity:
    """What this node tells the broker about itself."""

    short_hostname: str
    hostname: str
    address: str
    ssh_host_key: str
    data: str = ""

    def body(self) -> dict[str, str]:
        return {
            "short_hostname": self.short_hostname,
            "hostname": self.hostname,
            "address": self.address,
            "ssh_host_key": self.ssh_host_key,
            "data": self.data,
        }


def _route_address(uri: str) -> str:
    """The local address on the route to the broker: the one peers can reach us at,
    found by connecting a UDP socket (which sends nothing)."""
    parts = urlsplit(uri)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(sockaddr)
            return str(sock.getsockname()[0])
    except OSError as exc:
        raise AgentError(
            f"cannot find this node's address towards {host}: {exc}; pass --address"
        ) from None


def read_ssh_key(root: Path, given: str | None) -> str:
    """The SSH public host key: ``given`` (a key line or a .pub file), else the first
    of the usual host key files under ``root``/etc/ssh; see :func:`publishable_key`."""
    candidates = [root / "etc" / "ssh" / name for name in SSH_KEY_FILES]
    if given is not None:
        if given.startswith(("ssh-", "ecdsa-", "sk-")) or not Path(given).is_file():
            return publishable_key(given)
        candidates = [Path(given)]
    for path in candidates:
        if path.is_file():
            try:
                return publishable_key(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as exc:
                raise AgentError(f"cannot read SSH host key {path}: {exc}") from None
    raise AgentError(f"no SSH host key in {root / 'etc' / 'ssh'}; pass --ssh-host-key")


def _own_hostname() -> str:
    """This machine's fully qualified name, or its plain one when the resolver knows
    it by another (``localhost`` on many cloud images)."""
    name = socket.gethostname()
    fqdn = socket.getfqdn()
    return fqdn if fqdn.split(".")[0] == name.split(".")[0] else name


def discover_identity(
    ref: ContextRef,
    root: Path,
    *,
    short_hostname: str | None = None,
    hostname: str | None = None,
    address: str | None = None,
    ssh_host_key: str | None = None,
    data: str = "",
) -> Identity:
    """This node's identity; every field may be given instead of discovered."""
    host = hostname or _own_hostname()
    short = short_hostname or host.split(".")[0]
    return checked_identity(
        Identity(
            short,
            host,
            address or _route_address(ref.uri),
            read_ssh_key(root, ssh_host_key),
            data,
        )
    )


def checked_identity(identity: Identity) -> Identity:
    """``identity`` as the broker will take it (host names in lower case), or one
    :class:`AgentError` naming the field the broker would refuse."""
    try:
        node = NodeIn.model_validate(identity.body())
    except ValidationError as exc:
        problem = describe_errors(exc.errors())
        raise AgentError(f"this node's record cannot be published: {problem}") from None
    return Identity(**node.model_dump())


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent needs to run; built by the CLI."""

    context: ContextRef
    identity: Identity
    scripts: Path = DEFAULT_SCRIPTS
    state: Path = Path("/var/lib/elasticsite/agent.json")
    root: Path = Path("/")
    period: float = 0.0
    wait: float = 30.0
    leave: bool = True
    strict: bool = False
    once: bool = False
    script_timeout: float = 120.0
    host_keys: tuple[Path, ...] = ()
    """Files the SSH host private key may be in (to replace our old record under
    replace-on-rejoin); none: the usual ones under ``root``."""


def configure(
    *,
    userdata: Path | None = None,
    uri: str | None = None,
    key: str | None = None,
    secret: str | None = None,
    ca: Path | None = None,
    root: Path = Path("/"),
    state: Path | None = None,
    scripts: Path = DEFAULT_SCRIPTS,
    short_hostname: str | None = None,
    hostname: str | None = None,
    address: str | None = None,
    ssh_host_key: str | None = None,
    data: str = "",
    period: float = 0.0,
    wait: float = 30.0,
    leave: bool = True,
    strict: bool = False,
    once: bool = False,
    script_timeout: float = 120.0,
) -> AgentSettings:
    """Settings from user data (``userdata``, else ``$ELASTICSITE_USERDATA``) with
    explicit values taking precedence; identity discovered where not given."""
    path = userdata or (Path(os.environ[USERDATA_ENV]) if os.environ.get(USERDATA_ENV) else None)
    base = load_userdata(path) if path is not None else None
    uri = uri or (base.uri if base else None)
    key = key or (base.key if base else None)
    secret = secret or (base.secret if base else None)
    if not (uri and key and secret):
        raise AgentError(
            f"no context given: pass --userdata FILE (or set {USERDATA_ENV}), "
            "or --uri, --key and --secret"
        )
    if ca is not None:
        try:
            ca_pem: str | None = ca.read_text(encoding="utf-8")
        except OSError as exc:
            raise AgentError(f"cannot read CA certificate {ca}: {exc.strerror}") from None
    else:
        ca_pem = base.ca_pem if base else None
    if not scripts.is_dir():
        raise AgentError(f"scripts directory {scripts} does not exist")
    if period < 0 or not 0 <= wait <= 60:
        raise AgentError("--period must be >= 0 and --wait between 0 and 60 seconds")
    context = ContextRef(uri, key, secret, ca_pem)
    identity = discover_identity(
        context,
        root,
        short_hostname=short_hostname,
        hostname=hostname,
        address=address,
        ssh_host_key=ssh_host_key,
        data=data,
    )
    return AgentSettings(
        context=context,
        identity=identity,
        scripts=scripts,
        state=state or root / "var" / "lib" / "elasticsite" / "agent.json",
        root=root,
        period=period,
        wait=wait,
        leave=leave,
        strict=strict,
        once=once,
        script_timeout=script_timeout,
        host_keys=host_key_candidates(root, ssh_host_key),
    )
