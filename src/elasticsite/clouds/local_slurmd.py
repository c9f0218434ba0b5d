"""A local-cloud instance joining a real Slurm: the ``slurmd`` a cloud VM would boot.

On a real cloud the worker image starts ``slurmd`` at boot. A local-cloud instance
does the same on this machine, so the whole elastic loop runs against a real Slurm:

* ``cloud`` nodes (declared in ``slurm.conf`` with ``State=CLOUD`` and a ``Port=`` of
  their own, the power-saving mode): ``slurmd -D -b -N NODE``.
* ``dynamic`` nodes (``scontrol create node``, the external-manager mode): every
  ``slurmd -Z`` listens on the one ``SlurmdPort``, so each gets a network namespace of
  its own with a veth pair and link-local addresses, and a private ``/etc/hosts``
  where the controller's name points at the host end of the pair. Needs root.

``-b`` reports a fresh boot, without which slurmctld ignores a node it powered up.
``slurmd`` runs in the foreground (``-D``) as this worker's child, with an empty
signal mask, so stopping the instance stops its node.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from elasticsite.files import private_opener

log = logging.getLogger(__name__)

__all__ = ["SlurmdError", "SlurmdNode"]


def _run_dir() -> Path:
    """Where namespace slots are allocated (one file per slot, under a lock):
    ``$ELASTICSITE_NETNS_DIR``, read when used, or /run/elasticsite-netns."""
    return Path(os.environ.get("ELASTICSITE_NETNS_DIR", "/run/elasticsite-netns"))


_SLOTS = range(1, 121)
_SUBNET = 128
"""Third octet base: slot ``i`` uses 169.254.(128+i).1 (host) and .2 (node)."""
_STOP_WAIT = 10.0


class SlurmdError(Exception):
    """The node's slurmd could not be started."""


def _empty_mask() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SlurmdError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


@dataclass
class SlurmdNode:
    """The slurmd of one instance; :meth:`start` and :meth:`stop` bracket its life."""

    node: str
    cores: int
    mode: str = "dynamic"
    """``dynamic`` (``slurmd -Z`` in a namespace) or ``cloud`` (a declared node)."""
    feature: str = "elastic"
    slurmd: str = "/usr/sbin/slurmd"
    controller: str = "localhost"
    """The name slurm.conf gives the controller (resolved inside the namespace)."""
    log_path: Path | None = None
    preexec: Callable[[], None] | None = None
    """Runs in the child before exec (the worker makes slurmd die with the instance)."""
    proc: subprocess.Popen[bytes] | None = None
    slot: int | None = None

    @property
    def netns(self) -> str:
        return f"es-{self.node}"

    def start(self) -> None:
        if self.mode not in ("dynamic", "cloud"):
            raise SlurmdError(f"unknown slurm node mode {self.mode!r} (dynamic or cloud)")
        if not Path(self.slurmd).exists():
            raise SlurmdError(f"{self.slurmd} not found: is Slurm's slurmd installed?")
        if self.mode == "cloud":
            argv = [self.slurmd, "-D", "-b", "-N", self.node]
        else:
            self._make_netns()
            hosts = _run_dir() / f"{self.netns}.hosts"
            conf = f"CPUs={self.cores} Feature={self.feature}"
            # A private mount namespace lets this slurmd alone see the private hosts file.
            argv = [
                "nsenter", f"--net=/run/netns/{self.netns}", "unshare", "-m", "sh", "-c",
                'mount --bind "$0" /etc/hosts && exec "$1" -D -Z -b -N "$2" --conf "$3"',
                str(hosts), self.slurmd, self.node, conf,
            ]  # fmt: skip
        out = (
            open(self.log_path, "ab", opener=private_opener)  # noqa: SIM115
            if self.log_path
            else subprocess.DEVNULL
        )
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=self.preexec or _empty_mask,
                process_group=0,
            )
        except OSError as exc:
            self._drop_netns()
            raise SlurmdError(f"cannot start slurmd for {self.node}: {exc}") from exc
        finally:
            if self.log_path:
                out.close()  # type: ignore[union-attr]
        log.info("%s: slurmd started (%s mode, pid %d)", self.node, self.mode, self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop slurmd (TERM, then KILL) and take the namespace down."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(_STOP_WAIT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            log.info("%s: slurmd stopped", self.node)
        self._drop_netns()

    # -- the namespace of a dynamic node --------------------------------------------------

    def _make_netns(self) -> None:
        ns = self.netns
        with _locked(_run_dir() / "slots.lock"):
            for i in _SLOTS:
                slot_file = _run_dir() / f"slot-{i}"
                owner = slot_file.read_text() if slot_file.exists() else None
                # A slot is free, or left by an instance killed before it could clean up
                # (its namespace is gone), or it is this node's own from an earlier life.
                if (
                    owner is None
                    or owner == self.node
                    or not Path(f"/run/netns/es-{owner}").exists()
                ):
                    slot_file.write_text(self.node)
                    self.slot = i
                    subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
                    _ip("netns", "add", ns)
                    break
            else:
                raise SlurmdError("no free network namespace slot for another dynamic node")
        assert self.slot is not None
        i = self.slot
        host, peer = f"esv{i}h", f"esv{i}n"
        net = f"169.254.{_SUBNET + i}"
        try:
            subprocess.run(["ip", "link", "del", host], capture_output=True, check=False)
            _ip("link", "add", host, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("addr", "add", f"{net}.1/24", "dev", host)
            _ip("link", "set", host, "up")
            _ip("-n", ns, "addr", "add", f"{net}.2/24", "dev", peer)
            _ip("-n", ns, "link", "set", peer, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            (_run_dir() / f"{ns}.hosts").write_text(
                f"127.0.0.1 loopback\n{net}.1 {self.controller}\n{net}.2 {self.node}\n"
            )
        except SlurmdError:
            self._drop_netns()
            raise
        log.info("%s: network namespace %s at %s.2", self.node, ns, net)

    def _drop_netns(self) -> None:
        if self.slot is None:
            return
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", f"esv{self.slot}h"], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            (_run_dir() / f"{self.netns}.hosts").unlink()
        with contextlib.suppress(OSError):
            (_run_dir() / f"slot-{self.slot}").unlink()
        self.slot = None
