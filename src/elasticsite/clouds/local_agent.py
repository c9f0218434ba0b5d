"""The recontextualization agent of a local-cloud instance.

When the user data names a context (``context_uri``, ``context_key``,
``context_secret``), a local-cloud instance runs a real ``elasticsite agent``, as a
cloud VM would at boot. Each instance has an identity of its own: a loopback address
derived from its name (all of 127.0.0.0/8 reaches this machine), an SSH host key
generated at first boot, and a root directory under the cloud's state directory where
the agent's scripts keep its ``/etc/hosts`` block and ``ssh_known_hosts``. That root
and the host key's directory are the owner's alone; the private key is written 0600,
in one rename, so it is never readable by others nor seen half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from elasticsite.context.validation import as_label
from elasticsite.files import private_dir, private_file, private_opener, write_private

log = logging.getLogger(__name__)

__all__ = ["LocalAgent", "loopback_address"]

_STOP_WAIT = 10.0


def _empty_mask() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def loopback_address(name: str) -> str:
    """A stable address in 127.0.0.0/8 for an instance name (never 127.0.0.0/.255)."""
    digest = hashlib.sha256(name.encode()).digest()
    return f"127.{digest[0]}.{digest[1]}.{1 + digest[2] % 254}"


def host_key(root: Path, name: str) -> str:
    """The instance's SSH host public key line, generated once under ``root``."""
    ssh = root / "etc" / "ssh"
    pub = ssh / "ssh_host_ed25519_key.pub"
    secret = ssh / "ssh_host_ed25519_key"
    if pub.exists():
        if secret.exists():
            private_file(secret)  # one written by an older version may be looser
        return pub.read_text().strip()
    # Imported here: most instances run no agent, and every one should start fast.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_dir(ssh)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    write_private(secret, private)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    line = f"{public.decode()} root@{name}"
    pub.write_text(line + "\n")
    return line


@dataclass(eq=False)
class LocalAgent:
    """Start and stop one instance's agent process."""

    userdata_path: Path
    userdata: Mapping[str, str]
    node: str
    root: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @staticmethod
    def wanted(userdata: Mapping[str, str]) -> bool:
        return bool(userdata.get("context_uri"))

    def start(self, address: str | None = None, preexec: Callable[[], None] | None = None) -> None:
        """Start the agent; ``preexec`` runs in the child (the worker makes it die with
        the instance, as an agent dies with its VM)."""
        private_dir(self.root)
        short = as_label(self.node)
        site = as_label(self.userdata.get("site_id", "elasticsite"))
        argv = [
            sys.executable, "-m", "elasticsite", "agent",
            "--userdata", str(self.userdata_path),
            "--root", str(self.root),
            "--state", str(self.root / "agent-state.json"),
            "--short-hostname", short,
            "--hostname", f"{short}.{site}.internal",
            "--address", address or loopback_address(self.node),
            "--ssh-host-key", host_key(self.root, self.node),
        ]  # fmt: skip
        env = dict(os.environ)
        env["ELASTICSITE_FIREWALL"] = "off"  # the instance shares this machine's firewall
        with open(self.log_path, "ab", opener=private_opener) as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=preexec or _empty_mask,
                process_group=0,
            )
        log.info("%s: agent started (pid %d)", self.node, self.proc.pid)

    def stop(self) -> None:
        """Ask the agent to leave the context and exit; kill it if it does not."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(_STOP_WAIT)
        except subprocess.TimeoutExpired:
            log.warning("%s: agent did not stop in %.0f s; killing it", self.node, _STOP_WAIT)
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
