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

import urllib.parse
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.clouds.recorded_api import RecordedApi

RECORDED = Path(__file__).parent / "recorded" / "digitalocean"
TOKEN = "dop_v1_4f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a6c8e0b2d4f6a"


class DigitalOceanServer(RecordedApi):
    def __init__(self) -> None:
        self.droplets: dict[int, dict[str, Any]] = {}
        self.queries: list[str] = []
        self._next = 301_000_001
        super().__init__(RECORDED)

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        parts = [p for p in parsed.path.split("/") if p]
        body = self.body(req)
        kind = parts[1] if len(parts) > 1 else ""
        op = {
            ("droplets", "POST"): "create",
            ("droplets", "GET"): "list",
            ("droplets", "DELETE"): "delete",
        }.get((kind, method), kind)
        with self.lock:
            self.queries.append(parsed.query)
        error = self.asked(op)
        if req.headers.get("Authorization") != f"Bearer {TOKEN}":
            error = "unauthorized"
        if error is not None:
            status, payload = self.recorded("errors.json")[error]
            self.reply(req, status, payload)
            return

        def route() -> None:
            if op == "create":
                self._create(req, body)
            elif op == "list":
                self._list(req, urllib.parse.parse_qs(parsed.query).get("tag_name", [None])[0])
            elif op == "delete":
                self._delete(req, int(parts[2]))
            elif op in ("sizes", "images", "regions"):
                self.reply(req, 200, self.recorded(f"{op}.json"))
            else:
                self.reply(req, 404, self.recorded("errors.json")["image_not_found"][1])

        self.answer(req, lambda message: {"id": "server_error", "message": message}, route)

    def _create(self, req: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        sizes = {s["slug"] for s in self.recorded("sizes.json")["sizes"]}
        images = {str(i["id"]) for i in self.recorded("images.json")["images"]}
        if body.get("size") not in sizes:
            self.reply(req, 422, {"id": "unprocessable_entity", "message": "invalid size"})
            return
        if str(body.get("image")) not in images:
            self.reply(req, 404, self.recorded("errors.json")["image_not_found"][1])
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        droplet = self.recorded("droplet.json", name=body["name"], status="new", created=now)
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
            self.reply(req, 404, self.recorded("errors.json")["image_not_found"][1])
        else:
            self.reply(req, 204, None)


def digitalocean_server() -> DigitalOceanServer:
    """A server to use in a ``with`` block, which closes it."""
    return DigitalOceanServer()


def credentials(directory: Path, token: str = TOKEN) -> Path:
    """A libcloud credentials file for the test cloud (0600, as a real one should be)."""
    path = directory / "do-credentials.toml"
    path.write_text(f'key = "{token}"\n')
    path.chmod(0o600)
    return path
