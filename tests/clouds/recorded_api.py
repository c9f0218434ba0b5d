"""What the clouds' test APIs on 127.0.0.1 share (:mod:`.libcloud_server`,
:mod:`.openstack_server`): a threaded HTTP server whose every request goes to the
subclass's ``handle``, JSON bodies read from the recorded responses of a real cloud,
and the errors a test asks for with :meth:`RecordedApi.fail` (or sees a launch end in
with :meth:`RecordedApi.launch_error`).
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest

from elasticsite.clouds.base import CloudDriver, CloudError, LaunchRequest
from elasticsite.model import VMType


class Listener(ThreadingHTTPServer):
    request_queue_size = 128  # many launch threads connect at once; the default is 5


class RecordedApi:
    """An API on an ephemeral port of 127.0.0.1, answering from ``recorded`` (a
    directory of JSON files); ``seen`` lists the operations asked for. A ``with`` block
    closes it."""

    def __init__(self, recorded: Path) -> None:
        self.recorded_dir = recorded
        self.faults: dict[str, list[str]] = {}
        self.seen: list[str] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.handle(self, "GET")

            def do_POST(self) -> None:
                owner.handle(self, "POST")

            def do_DELETE(self) -> None:
                owner.handle(self, "DELETE")

            def log_message(self, *args: object) -> None:
                pass

        self.http = Listener(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def fail(self, operation: str, error: str, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``operation`` with the recorded error
        ``error`` (a key of the recorded ``errors.json``)."""
        with self.lock:
            self.faults.setdefault(operation, []).extend([error] * times)

    def launch_error(
        self, cloud: CloudDriver, vm_type: VMType, operation: str, error: str
    ) -> CloudError:
        """What ``cloud`` raises launching a ``vm_type`` worker while the next call of
        ``operation`` answers ``error``; the fault does not outlast the launch."""
        self.fail(operation, error)
        try:
            with pytest.raises(CloudError) as raised:
                cloud.launch(LaunchRequest(vm_type, ["w1"]))
        finally:
            with self.lock:
                self.faults.clear()
        return raised.value

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    # -- for the subclasses' handlers ------------------------------------------------

    def recorded(self, file: str, **values: str) -> Any:
        """A recorded body, with ``{key}`` replaced by each of ``values``."""
        text = (self.recorded_dir / file).read_text()
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        return json.loads(text)

    @staticmethod
    def body(req: BaseHTTPRequestHandler) -> Any:
        """The request's JSON body ({} when it has none)."""
        length = int(req.headers.get("Content-Length") or 0)
        return json.loads(req.rfile.read(length) or b"{}") if length else {}

    def asked(self, operation: str) -> str | None:
        """Note ``operation`` as asked for; the error a test queued for it, if any."""
        with self.lock:
            self.seen.append(operation)
            queued = self.faults.get(operation)
            return queued.pop(0) if queued else None

    def reply(
        self, req: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict | None = None
    ) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(data)

    def answer(
        self, req: BaseHTTPRequestHandler, fault: Callable[[str], Any], handler: Callable[[], None]
    ) -> None:
        """``handler()``; a bug in it shows (its traceback) and answers 500 with the
        body ``fault`` makes of it, rather than hanging the client."""
        try:
            handler()
        except Exception as exc:
            traceback.print_exc()
            self.reply(req, 500, fault(repr(exc)))
