"""A small DigitalOcean (API v2) on 127.0.0.1, for the generic libcloud driver's tests:
libcloud's own DigitalOcean driver talks to it over HTTP. Droplets live in memory
(``new``, then ``active`` on the next look); every body follows the recorded
responses in ``recorded/digitalocean/``, errors included.

:meth:`DigitalOceanServer.fail` makes the next calls of one operation (``create``,
``list``, ``delete``, ``sizes``, ``images``, ``regions``) answer with a recorded error;
``seen`` lists the operations asked for and ``queries`` their query strings. The
droplet list honours ``tag_name`` as DigitalOcean's does.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).parent / "recorded" / "digitalocean"
TOKEN = "dop_v1_4f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a6c8e0b2d4f6a"


def recorded(file: str, **values: str) -> Any:
    text = (RECORDED / file).read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return json.loads(text)


class Listener(ThreadingHTTPServer):
    request_queue_size = 128  # many launch threads connect at once; the default is 5


class DigitalOceanServer:
    def __init__(self) -> None:
        self.droplets: dict[int, dict[str, Any]] = {}
        self.faults: dict[str, list[str]] = {}
        self.seen: list[str] = []
        self.queries: list[str] = []
        self.lock = threading.Lock()
        self._next = 301_000_001
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
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def fail(self, operation: str, error: str, times: int = 1) -> None:
        with self.lock:
            self.faults.setdefault(operation, []).extend([error] * times)

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        parts = [p for p in parsed.path.split("/") if p]
        length = int(req.headers.get("Content-Length") or 0)
        body = json.loads(req.rfile.read(length) or b"{}") if length else {}
        kind = parts[1] if len(parts) > 1 else ""
        op = {
            ("droplets", "POST"): "create",
            ("droplets", "GET"): "list",
            ("droplets", "DELETE"): "delete",
        }.get((kind, method), kind)
        with self.lock:
            self.seen.append(op)
            self.queries.append(parsed.query)
            queued = self.faults.get(op)
            error = queued.pop(0) if queued else None
        if req.headers.get("Authorization") != f"Bearer {TOKEN}":
            error = "unauthorized"
        if error is not None:
            status, payload = recorded("errors.json")[error]
            self.reply(req, status, payload)
            return
        try:
            if op == "create":
                self._create(req, body)
            elif op == "list":
                self._list(req, urllib.parse.parse_qs(parsed.query).get("tag_name", [None])[0])
            elif op == "delete":
                self._delete(req, int(parts[2]))
            elif op in ("sizes", "images", "regions"):
                self.reply(req, 200, recorded(f"{op}.json"))
            else:
                self.reply(req, 404, recorded("errors.json")["image_not_found"][1])
        except Exception as exc:  # a bug here must show, not hang the client
            import traceback

            traceback.print_exc()
            self.reply(req, 500, {"id": "server_error", "message": repr(exc)})

    def reply(self, req: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _create(self, req: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        sizes = {s["slug"] for s in recorded("sizes.json")["sizes"]}
        images = {str(i["id"]) for i in recorded("images.json")["images"]}
        if body.get("size") not in sizes:
            self.reply(req, 422, {"id": "unprocessable_entity", "message": "invalid size"})
            return
        if str(body.get("image")) not in images:
            self.reply(req, 404, recorded("errors.json")["image_not_found"][1])
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        droplet = recorded("droplet.json", name=body["name"], status="new", created=now)
        with self.lock:
            droplet["id"] = self._next
            self._next += 1
            droplet["tags"] = list(body.get("tags") or [])
            droplet["user_data"] = body.get("user_data")
            self.droplets[droplet["id"]] = droplet
        shown = {k: v for k, v in droplet.items() if k != "user_data"}
        self.reply(req, 202, {"droplet": shown, "links": {"actions": []}})

    def _list(self, req: BaseHTTPRequestHandler, tag: str | None = None) -> None:
        with self.lock:
            listed = [d for d in self.droplets.values() if tag is None or tag in d["tags"]]
            shown = [{k: v for k, v in d.items() if k != "user_data"} for d in listed]
            for d in listed:
                d["status"] = "active"
        self.reply(req, 200, {"droplets": shown, "links": {}, "meta": {"total": len(shown)}})

    def _delete(self, req: BaseHTTPRequestHandler, droplet_id: int) -> None:
        with self.lock:
            gone = self.droplets.pop(droplet_id, None)
        if gone is None:
            self.reply(req, 404, recorded("errors.json")["image_not_found"][1])
        else:
            self.reply(req, 204, None)


@contextmanager
def digitalocean_server() -> Iterator[DigitalOceanServer]:
    server = DigitalOceanServer()
    try:
        yield server
    finally:
        server.close()


def credentials(directory: Path, token: str = TOKEN) -> Path:
    """A libcloud credentials file for the test cloud (0600, as a real one should be)."""
    path = directory / "do-credentials.toml"
    path.write_text(f'key = "{token}"\n')
    path.chmod(0o600)
    return path
