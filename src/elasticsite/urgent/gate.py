"""The cluster's urgent submit gate: a local socket that knows who is asking from the kernel.

``elasticsite urgent gate`` runs as the site (it alone can read the resource's key)
and listens on a Unix socket any local user may connect to. The identity of each
request is the Unix user the kernel reports for the connecting process
(``SO_PEERCRED``): never a name the client sends, so a user can submit urgent jobs as
themself and as nobody else, without ever seeing the key. ``elasticsite urgent
submit`` goes through the gate when ``[urgent] socket`` is set.

One request per connection: a JSON object on one line (at most 64 KiB, nested at most 8
deep, sent within 10 s of connecting), answered by one JSON line. Requests name only
what to run (``urgency``, ``command``, ``cores``, ``walltime``, optionally
``resource``); anything else is refused. The job is submitted for the user the kernel
named, and runs as that user or not at all (:mod:`elasticsite.batch.identity`).

The gate is bounded: at most 64 connections served at once (``max_connections``), 8 of
them from one user; more are answered at once that it is busy. No input, however
malformed, large, deep, slow or cut short, gets more than a one-line answer and one log
line.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pwd
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_DEPTH",
    "MAX_REQUEST",
    "Gate",
    "GateError",
    "ask_gate",
    "parse_request",
    "peer_user",
    "read_request",
]

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024
"""Bytes of one request line, at most."""
MAX_DEPTH = 8
"""Nesting of JSON arrays and objects in a request, at most (a good one has 2)."""
MAX_CONNECTIONS = 64
"""Connections served at once, by default; more are told the gate is busy."""
MAX_PER_USER = 8
"""Connections of one user served at once, by default."""
READ_TIMEOUT = 10.0
"""Seconds a client has to send its whole request, by default."""
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


def _too_deep(data: bytes) -> bool:
    """Whether JSON ``data`` nests arrays and objects deeper than :data:`MAX_DEPTH`
    (checked before parsing: the parser would recurse as deep as the input says)."""
    depth, in_string, escaped = 0, False, False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


def parse_request(line: bytes) -> dict[str, Any]:
    """A request, checked: what to run and nothing about who runs it."""
    if len(line) > MAX_REQUEST:
        raise GateError(f"the request is larger than {MAX_REQUEST} bytes")
    if _too_deep(line):
        raise GateError(f"the request nests deeper than {MAX_DEPTH} levels")
    try:
        req = json.loads(line)
    except (UnicodeDecodeError, ValueError, RecursionError):
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
    if (not isinstance(walltime, int | float) or isinstance(walltime, bool)
            or not 1 <= walltime <= 366 * 86400):  # fmt: skip
        raise GateError("walltime must be 1 s to a year")
    resource = req.get("resource")
    if resource is not None and (not isinstance(resource, str) or not 0 < len(resource) <= 128):
        raise GateError("resource must be a name")
    return {"urgency": req["urgency"], "command": command, "cores": cores,
            "walltime": float(walltime), "resource": resource}  # fmt: skip


def read_request(sock: socket.socket, timeout: float) -> bytes:
    """One request line from ``sock``, read within ``timeout`` seconds in all (a client
    trickling bytes gets no more time than one that sends nothing); GateError if it is
    late, too large or empty. A client that stops sending (half-close) ends it."""
    deadline = time.monotonic() + timeout
    data = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise GateError(f"no complete request within {timeout:g} s")
        sock.settimeout(left)
        try:
            chunk = sock.recv(MAX_REQUEST + 1 - len(data))
        except TimeoutError:
            continue  # the deadline check above answers
        if not chunk:
            break
        end = chunk.find(b"\n")
        data += chunk if end < 0 else chunk[:end]
        if len(data) > MAX_REQUEST:
            raise GateError(f"the request is larger than {MAX_REQUEST} bytes")
        if end >= 0:
            break
    if not data.strip():
        raise GateError("empty request: send one JSON object on one line")
    return bytes(data)


class _Server(socketserver.UnixStreamServer):
    """Accepts connections and gives each admitted one a thread of its own."""

    def __init__(self, path: str, gate: Gate) -> None:
        self.gate = gate
        super().__init__(path, socketserver.BaseRequestHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        uid = _peer_uid(request)
        refusal = self.gate._admit(uid)
        if refusal is None:
            thread = threading.Thread(target=self._run, args=(request, uid), daemon=True)
            try:
                thread.start()
                return
            except RuntimeError:  # no thread to be had
                self.gate._release(uid)
                refusal = "the gate is busy; try again"
        self.gate._turn_away(request, uid, refusal)
        self.shutdown_request(request)

    def _run(self, request: socket.socket, uid: int) -> None:
        try:
            self.gate._serve(request)
        finally:
            self.gate._release(uid)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.error("urgent gate: a connection failed: %s", sys.exc_info()[1])


def _peer_uid(sock: socket.socket) -> int:
    try:
        return peer_user(sock)[0]
    except OSError:
        return -1


class Gate:
    """The gate on ``path``; ``handle(user, request)`` does the submission and answers.

    At most ``max_connections`` connections are served at once, ``max_per_user`` of them
    from one user; more are answered at once that the gate is busy. A request must
    arrive within ``read_timeout`` seconds of the connection.
    """

    def __init__(
        self,
        path: Path | str,
        handle: Handler,
        *,
        max_connections: int = MAX_CONNECTIONS,
        max_per_user: int = MAX_PER_USER,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        if max_connections < 1 or max_per_user < 1 or not read_timeout > 0:
            raise ValueError("the gate needs room for a connection and time to read it")
        self.path = Path(path)
        self.handle = handle
        self.max_connections = max_connections
        self.max_per_user = max_per_user
        self.read_timeout = read_timeout
        self._lock = threading.Lock()
        self._active = 0
        self._per_uid: dict[int, int] = {}
        self._turned_away = 0
        self._told_at = -math.inf
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            if self.path.is_socket():
                self.path.unlink()  # left by a gate that died
        self._server = _Server(str(self.path), self)
        os.chmod(self.path, 0o666)  # anyone local may ask: who they are comes from the kernel
        self._thread: threading.Thread | None = None

    # -- admission ---------------------------------------------------------------------

    def _admit(self, uid: int) -> str | None:
        """Count a new connection of ``uid`` in, or say why not."""
        with self._lock:
            if self._active >= self.max_connections:
                return f"the gate is busy ({self.max_connections} connections); try again"
            if self._per_uid.get(uid, 0) >= min(self.max_per_user, self.max_connections):
                return (f"too many connections of yours at once ({self.max_per_user}); "
                        "finish those first")  # fmt: skip
            self._active += 1
            self._per_uid[uid] = self._per_uid.get(uid, 0) + 1
            return None

    def _release(self, uid: int) -> None:
        with self._lock:
            self._active -= 1
            left = self._per_uid.pop(uid, 1) - 1
            if left:
                self._per_uid[uid] = left

    def _turn_away(self, sock: socket.socket, uid: int, why: str) -> None:
        """Answer a connection not admitted, without ever waiting on it; logged at most
        every 10 s, with how many were turned away."""
        with suppress(OSError):
            sock.setblocking(False)
            sock.send(json.dumps({"ok": False, "error": why}).encode() + b"\n")
        with self._lock:
            self._turned_away += 1
            now = time.monotonic()
            if now - self._told_at < 10.0:
                return
            count, self._turned_away, self._told_at = self._turned_away, 0, now
        log.warning("urgent gate: turned away %d connection(s), the last of uid %d: %s",
                    count, uid, why)  # fmt: skip

    # -- one request -------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        """Read, check and carry out one request, and answer it; never raises."""
        uid, user = -1, "?"
        try:
            uid, user = peer_user(sock)
            answer = self.handle(user, parse_request(read_request(sock, self.read_timeout)))
        except GateError as exc:
            answer = {"ok": False, "error": str(exc)}
        except OSError as exc:  # the client went away
            answer = {"ok": False, "error": f"connection lost: {exc.strerror or exc}"}
        except Exception as exc:  # a bug must not take the gate down, nor fill its log
            log.error("urgent gate: request of %s failed: %s: %s", user, type(exc).__name__, exc)
            log.debug("urgent gate: the failure", exc_info=True)
            answer = {"ok": False, "error": f"the gate failed: {type(exc).__name__}"}
        log.info("urgent gate: uid %d (%s): %s", uid, user,
                 "ok" if answer.get("ok") else answer.get("error"))  # fmt: skip
        try:
            data = json.dumps(answer).encode() + b"\n"
        except (TypeError, ValueError) as exc:
            log.error("urgent gate: cannot send the answer to %s: %s", user, exc)
            data = b'{"ok": false, "error": "the gate failed: unanswerable"}\n'
        with suppress(OSError):
            sock.settimeout(self.read_timeout)
            sock.sendall(data)

    # -- running -----------------------------------------------------------------------

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
            # a gate that turns us away answers first and hangs up: read why
            with suppress(BrokenPipeError, ConnectionResetError):
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
