"""``elasticsite`` commands for tests without paying, for each, the half second of CPU
that starting Python and importing the command line costs: a server process imports
every module of the package once and forks a child for each command. The child is a process of
its own like any other: it gets the caller's argv, working directory, environment and
standard streams (passed as file descriptors over a Unix socket), runs the command and
exits with its status, running its exit handlers as ``python -m elasticsite`` does.

What a forked child shares with the server is what importing the command line set up
with the server's environment, which is the plain one ``run_cli`` gives every command
(``PATH=/usr/bin:/bin``); the two consoles, which read the environment when created,
are created again in the child. The server also loads matplotlib and the system's
font list, which a command drawing a plot in a fresh HOME would otherwise build again.
``ELASTICSITE_TEST_FORK=0`` starts a real interpreter for each command instead."""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    return os.environ.get("ELASTICSITE_TEST_FORK", "1") != "0"


# --- the server -------------------------------------------------------------------------


def serve(path: str) -> None:  # pragma: no cover - runs in the server process
    """Listen on ``path`` and fork a command for each connection, until stdin closes."""
    prepared = _prepare()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    running: dict[int, tuple[Any, socket.socket]] = {}  # pid: (its pidfd, its caller)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                return  # the test process ended
            if key.data == "listener":
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for watched, caller in running.values():
                        watched.close()
                        caller.close()
                    conn.close()
                    selector.close()
                    _child(request, fds, prepared)  # raises SystemExit
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                watched = os.fdopen(os.pidfd_open(pid), "rb", buffering=0)
                running[pid] = (watched, conn)
                selector.register(watched, selectors.EVENT_READ, ("ended", pid))
                selector.register(conn, selectors.EVENT_READ, ("caller", pid))
            elif key.data[0] == "caller":
                # A caller sends nothing after its request: this is its end. A command
                # whose caller was killed is killed too, as it would be in its group.
                if _closed(key.fileobj):  # type: ignore[arg-type]
                    selector.unregister(key.fileobj)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(key.data[1], signal.SIGKILL)
            else:
                pid = key.data[1]
                watched, conn = running.pop(pid)
                selector.unregister(watched)
                watched.close()
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the caller may have given up
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(conn)
                conn.close()


def _closed(conn: socket.socket) -> bool:  # pragma: no cover - in the server
    """Whether the caller on ``conn`` has closed its end (what it sent is dropped)."""
    try:
        return conn.recv(64) == b""
    except OSError:
        return True


def _prepare() -> Any:  # pragma: no cover - runs in the server process
    """Import every module of the package (each command imports what it needs when it
    runs) and build the command tree typer builds at each start; freeze what is there,
    so that the children do not copy it as they go."""
    import gc
    import importlib
    import pkgutil

    import typer.main

    import elasticsite
    from elasticsite.cli import app

    for module in pkgutil.walk_packages(elasticsite.__path__, "elasticsite."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    # matplotlib, which the package imports only to draw, and its list of the system's
    # fonts: read once here (and built once, in the server's HOME), not by every command
    # that draws a plot, each in the fresh HOME its test gives it (a second of CPU each)
    import matplotlib.font_manager  # noqa: F401  (loads the list on import)
    from matplotlib.backends import backend_agg  # noqa: F401

    command = typer.main.get_command(app)
    gc.freeze()
    return app, command


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("request cut short")
        data += more
    return json.loads(data[_HEADER.size :]), list(fds)


def _child(request: dict[str, Any], fds: list[int], prepared: Any) -> None:  # pragma: no cover
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["elasticsite", *request["args"]]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from elasticsite.cli import common

    common.console.__init__(emoji=False, markup=False)  # type: ignore[misc]
    common.err.__init__(stderr=True, emoji=False, markup=False)  # type: ignore[misc]
    # What typer's ``app()`` does, with the command tree built already.
    import typer.main

    app, command = prepared
    sys.excepthook = typer.main.except_hook
    try:
        command(prog_name="elasticsite")
    except Exception as exc:
        config = typer.main.DeveloperExceptionConfig(
            pretty_exceptions_enable=app.pretty_exceptions_enable,
            pretty_exceptions_show_locals=app.pretty_exceptions_show_locals,
            pretty_exceptions_short=app.pretty_exceptions_short,
        )
        setattr(exc, typer.main._typer_developer_exception_attr_name, config)
        raise
    raise SystemExit(0)


# --- the caller -------------------------------------------------------------------------


class _Server:
    def __init__(self) -> None:
        self.directory = tempfile.TemporaryDirectory(prefix="elasticsite-cli-")
        self.path = os.path.join(self.directory.name, "fork.sock")
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "import tests.forked_cli as f; f.serve(sys.argv[1])"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self.directory.name,
            env={"PATH": "/usr/bin:/bin", "HOME": self.directory.name},
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the command server did not start (status {self.process.wait()})")
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()
        self.directory.cleanup()


_server: _Server | None = None


def _running() -> _Server:
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server()
    return _server


def _connect() -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(_running().path)
    return conn


def _line(conn: socket.socket, buffer: bytearray) -> int:
    while b"\n" not in buffer:
        chunk = conn.recv(64)
        if not chunk:
            raise ConnectionError("the command server closed the connection")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return int(line)


def _text(data: bytes) -> str:
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``elasticsite ARGS`` forked in ``cwd`` with ``env``, its output captured as text,
    as ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` would."""
    command = [sys.executable, "-m", "elasticsite", *args]
    payload = json.dumps({"args": args, "cwd": str(cwd), "env": env}).encode()
    with (
        open(os.devnull, "rb") as stdin,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        _connect() as conn,
    ):
        message = _HEADER.pack(len(payload)) + payload
        socket.send_fds(conn, [message], [stdin.fileno(), out.fileno(), err.fileno()])
        buffer = bytearray()
        conn.settimeout(30)
        pid = _line(conn, buffer)
        conn.settimeout(timeout)
        try:
            code = _line(conn, buffer)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            conn.settimeout(None)
            _line(conn, buffer)
            out.seek(0)
            err.seek(0)
            raise subprocess.TimeoutExpired(command, timeout, out.read(), err.read()) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, code, _text(out.read()), _text(err.read()))


# --- a command for a shell script ---------------------------------------------------------

_FORWARDED = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2
)  # fmt: skip


def write_shim(path: Path) -> Path:
    """An executable ``path`` that runs ``elasticsite ARGS`` as :func:`run` does, for a
    shell script: the command gets the script's argv, directory, environment and
    standard streams, every signal the shim gets that a person or a test would send
    (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2) is passed on to it, the shim's status is
    the command's, and a shim killed outright takes its command with it."""
    server = _running()
    path.write_text(
        f"#!{sys.executable} -IS\n"
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.forked_cli import client\n"
        f"sys.exit(client({server.path!r}))\n"
    )
    path.chmod(0o755)
    return path


def client(path: str) -> int:  # pragma: no cover - runs in a shim
    """The shim's life (:func:`write_shim`): its command's status."""
    pid: int | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if pid is None:
            pending.append(signum)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    request = {"args": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    payload = json.dumps(request).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        message = _HEADER.pack(len(payload)) + payload
        socket.send_fds(conn, [message], [0, 1, 2])
        buffer = bytearray()
        pid = _line(conn, buffer)
        for signum in pending:
            os.kill(pid, signum)
        code = _line(conn, buffer)
    if code < 0:  # killed by a signal: so is the shim, for its caller to see
        with contextlib.suppress(OSError, ValueError):  # (SIGKILL keeps its action)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
