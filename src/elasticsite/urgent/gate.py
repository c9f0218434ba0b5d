"""The cluster's urgent submit gate: a local socket that knows who is asking from the kernel.

``elasticsite urgent gate`` runs as the site (it alone can read the resource's key)
and listens on a Unix socket any local user may connect to. The identity of each
request is the Unix user the kernel reports for the connecting process
(``SO_PEERCRED``): never a name the client sends, so a user can submit urgent jobs as
themself and as nobody else, without ever seeing the key. ``elasticsite urgent
submit`` goes through the gate when ``[urgent] socket`` is set.

One request per connection: a JSON object on one line (at most 64 KiB), answered by one
JSON line. Requests name only what to run (``urgency``, ``command``, ``cores``,
``walltime``, optionally ``resource``); anything else is refused.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

__all__ = ["MAX_REQUEST", "Gate", "GateError", "ask_gate", "parse_request", "peer_user"]

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024
_FIELDS = {"urgency", "command", "cores", "walltime", "resource"}
Handler = Callable[[str, Mapping[str, Any]], dict[str, Any]]


class GateError(Exception):
    """The gate could not be reached, or refused the request; the message says why."""


def peer_user(sock: socket.socket) -> tuple[int, str]:
    """The uid and user name of the process at the other end of a Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, str(uid)  # a uid with no passwd entry (a container): its number


def parse_request(line: bytes) -> dict[str, Any]:
    """A request, checked: what to run and nothing about who runs it."""
    try:
        req = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        raise GateError("the request is not JSON") from None
    if not isinstance(req, dict):
        raise GateError("the request must be a JSON object")
    extra = set(req) - _FIELDS
    if extra:
        raise GateError(f"unknown field(s) {', '.join(sorted(extra))}: the gate takes who you "
                        "are from the kernel, not from the request")  # fmt: skip
    if req.get("urgency") not in ("red", "orange", "yellow"):
        raise GateError("urgency must be red, orange or yellow")
    command = req.get("command")
    if (not isinstance(command, list) or not command or len(command) > 4096
            or not all(isinstance(a, str) and "\x00" not in a for a in command)):  # fmt: skip
        raise GateError("command must be a non-empty list of strings")
    cores, walltime = req.get("cores", 1), req.get("walltime", 3600)
    if not isinstance(cores, int) or isinstance(cores, bool) or not 1 <= cores <= 1_000_000:
        raise GateError("cores must be a whole number from 1")
    if not isinstance(walltime, int | float) or not 1 <= walltime <= 366 * 86400:
        raise GateError("walltime must be 1 s to a year")
    resource = req.get("resource")
    if resource is not None and (not isinstance(resource, str) or not 0 < len(resource) <= 128):
        raise GateError("resource must be a name")
    return {"urgency": req["urgency"], "command": command, "cores": cores,
            "walltime": float(walltime), "resource": resource}  # fmt: skip


class _Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self) -> None:
        gate: Gate = self.server.gate  # type: ignore[attr-defined]
        uid, user = peer_user(self.request)
        try:
            line = self.rfile.readline(MAX_REQUEST + 1)
            if len(line) > MAX_REQUEST:
                raise GateError(f"the request is larger than {MAX_REQUEST} bytes")
            answer = gate.handle(user, parse_request(line))
        except GateError as exc:
            answer = {"ok": False, "error": str(exc)}
        except Exception as exc:  # a bug must not take the gate down
            log.exception("urgent gate: request from %s failed", user)
            answer = {"ok": False, "error": f"the gate failed: {type(exc).__name__}"}
        log.info("urgent gate: uid %d (%s): %s", uid, user,
                 "ok" if answer.get("ok") else answer.get("error"))  # fmt: skip
        with suppress(OSError):
            self.wfile.write(json.dumps(answer).encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Gate:
    """The gate on ``path``; ``handle(user, request)`` does the submission and answers."""

    def __init__(self, path: Path | str, handle: Handler) -> None:
        self.path = Path(path)
        self.handle = handle
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            if self.path.is_socket():
                self.path.unlink()  # left by a gate that died
        self._server = _Server(str(self.path), _Handler)
        self._server.gate = self  # type: ignore[attr-defined]
        os.chmod(self.path, 0o666)  # anyone local may ask: who they are comes from the kernel
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with suppress(FileNotFoundError):
            self.path.unlink()


def ask_gate(path: Path | str, request: Mapping[str, Any], timeout: float = 120.0) -> dict:
    """Send one request to the gate at ``path``; its answer (``ok`` true), or GateError."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(dict(request)).encode() + b"\n")
            data = s.makefile("rb").readline(MAX_REQUEST)
    except OSError as exc:
        raise GateError(f"cannot reach the urgent gate at {path}: {exc.strerror or exc}") from None
    try:
        answer = json.loads(data)
    except ValueError:
        raise GateError(f"the urgent gate at {path} gave no answer") from None
    if not answer.get("ok"):
        raise GateError(str(answer.get("error", "refused")))
    return dict(answer)
