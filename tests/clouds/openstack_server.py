"""A small OpenStack on 127.0.0.1 for the openstack driver's tests: Keystone v3 tokens,
Nova's servers and flavours, Glance's images, answering with the recorded response
bodies in ``recorded/openstack/`` (their ids, fields and error bodies as real clouds
send them) and keeping servers in memory (BUILD, then ACTIVE on the next look).

:meth:`OpenStackServer.fail` makes the next calls of one operation answer with a
recorded error; :meth:`OpenStackServer.no_valid_host` makes the next servers Nova
cannot place (``ERROR`` with its fault), as a cloud out of capacity does; ``delay``
holds every answer back that many seconds, as a busy cloud does.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).parent / "recorded" / "openstack"
USER, PASSWORD, PROJECT = "burst", "s3cret-burst-password", "science"
TOKEN = "gAAAAABrecordedtokenvalue0000000000000000"


def recorded(file: str, **values: str) -> Any:
    text = (RECORDED / file).read_text()
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return json.loads(text)


class Listener(ThreadingHTTPServer):
    request_queue_size = 128  # many launch threads connect at once; the default is 5


class OpenStackServer:
    """See the module docstring; ``url`` is its Keystone (``.../identity/v3``)."""

    def __init__(self) -> None:
        self.servers: dict[str, dict[str, Any]] = {}
        self.faults: dict[str, list[str]] = {}
        self.unplaceable = 0
        self.delay = 0.0
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
        self.base = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.url = f"{self.base}/identity/v3"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    # -- test controls ---------------------------------------------------------------

    def fail(self, operation: str, error: str, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``operation`` (``auth``, ``create``,
        ``list``, ``delete``, ``flavor``, ``image``) with recorded error ``error``."""
        with self.lock:
            self.faults.setdefault(operation, []).extend([error] * times)

    def no_valid_host(self, servers: int = 1) -> None:
        with self.lock:
            self.unplaceable += servers

    # -- the API -------------------------------------------------------------------------

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        path = parsed.path.rstrip("/")
        length = int(req.headers.get("Content-Length") or 0)
        body = json.loads(req.rfile.read(length) or b"{}") if length else {}
        op = self._operation(method, path)
        with self.lock:
            self.seen.append(op)
            queued = self.faults.get(op)
            error = queued.pop(0) if queued else None
        time.sleep(self.delay)
        if error is not None:
            status, payload = recorded("errors.json")[error]
            self.reply(req, status, payload)
            return
        if op != "auth" and op != "discover" and req.headers.get("X-Auth-Token") != TOKEN:
            self.reply(req, 401, recorded("errors.json")["unauthorized"][1])
            return
        handler = getattr(self, f"_{op}", None)
        if handler is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": f"no {path}"}})
            return
        try:
            handler(req, path, parsed.query, body)
        except Exception as exc:  # a bug here must show, not hang the client
            import traceback

            traceback.print_exc()
            self.reply(req, 500, {"computeFault": {"code": 500, "message": repr(exc)}})

    @staticmethod
    def _operation(method: str, path: str) -> str:
        if path.endswith("/auth/tokens"):
            return "auth"
        if path in ("/identity/v3", "/identity", "/compute/v2.1", "/compute", "/image"):
            return "discover"
        if path.startswith("/compute/v2.1/servers"):
            return {"POST": "create", "DELETE": "delete"}.get(method, "list")
        if path.startswith("/compute/v2.1/flavors"):
            return "flavor"
        if path.startswith("/image/v2/images"):
            return "image"
        return "other"

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

    def _discover(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        name = {
            "/identity/v3": "identity_version.json",
            "/compute/v2.1": "compute_version.json",
            "/image": "image_versions.json",
        }.get(path)
        if name is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": path}})
            return
        self.reply(req, 200, recorded(name, base=self.base))

    def _auth(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        identity = body.get("auth", {}).get("identity", {})
        user = identity.get("password", {}).get("user", {})
        if user.get("name") != USER or user.get("password") != PASSWORD:
            self.reply(req, 401, recorded("errors.json")["unauthorized"][1])
            return
        self.reply(req, 201, recorded("token.json", base=self.base), {"X-Subject-Token": TOKEN})

    def _flavor(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        flavors = recorded("flavors.json", base=self.base)["flavors"]
        key = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if key == "detail" or key == "flavors":
            self.reply(req, 200, {"flavors": flavors})
            return
        found = next((f for f in flavors if key == f["id"]), None)
        if found is None:
            self.reply(req, 404, recorded("errors.json")["flavor_not_found"][1])
        else:
            self.reply(req, 200, {"flavor": found})

    def _image(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        images = recorded("images.json")["images"]
        key = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if key == "images":
            wanted = urllib.parse.parse_qs(query).get("name")
            found = [i for i in images if not wanted or i["name"] in wanted]
            self.reply(req, 200, {"images": found, "schema": "/v2/schemas/images"})
            return
        image = next((i for i in images if i["id"] == key), None)
        if image is None:
            self.reply(req, 404, None)
        else:
            self.reply(req, 200, image)

    def _create(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        spec = body["server"]
        sid = str(uuid.uuid4())
        flavor = next(
            f for f in recorded("flavors.json", base=self.base)["flavors"]
            if f["id"] == spec["flavorRef"]
        )  # fmt: skip
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        server = recorded(
            "server.json", base=self.base, id=sid, name=spec["name"], status="BUILD",
            image=spec["imageRef"], flavor=flavor["name"], created=now,
        )  # fmt: skip
        server["metadata"] = dict(spec.get("metadata") or {})
        server["user_data"] = spec.get("user_data")
        with self.lock:
            if self.unplaceable:
                self.unplaceable -= 1
                server["status"] = "ERROR"
                server["fault"] = recorded("errors.json", created=now)["no_valid_host"][1]
            self.servers[sid] = server
        self.reply(req, 202, recorded("server_created.json", base=self.base, id=sid))

    def _list(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        key = path.rsplit("/", 1)[-1]
        with self.lock:
            servers = [dict(s) for s in self.servers.values()]
            for s in self.servers.values():
                if s["status"] == "BUILD":
                    s["status"] = "ACTIVE"  # up by the next look
        shown = [{k: v for k, v in s.items() if k != "user_data"} for s in servers]
        if key in ("detail", "servers"):
            self.reply(req, 200, {"servers": shown})
            return
        found = next((s for s in shown if s["id"] == key), None)
        if found is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": "Instance not found"}})
        else:
            self.reply(req, 200, {"server": found})

    def _delete(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        sid = path.rsplit("/", 1)[-1]
        with self.lock:
            gone = self.servers.pop(sid, None)
        if gone is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": "Instance not found"}})
        else:
            self.reply(req, 204, None)


@contextmanager
def openstack_server() -> Iterator[OpenStackServer]:
    server = OpenStackServer()
    try:
        yield server
    finally:
        server.close()


def openrc(directory: Path, server: OpenStackServer, password: str = PASSWORD) -> Path:
    """An openrc file for the test cloud (0600, as a real one should be)."""
    path = directory / "openrc"
    path.write_text(
        f"export OS_AUTH_URL={server.url}\nexport OS_USERNAME={USER}\n"
        f"export OS_PASSWORD='{password}'\nexport OS_PROJECT_NAME={PROJECT}\n"
        "export OS_USER_DOMAIN_NAME=Default\nexport OS_PROJECT_DOMAIN_NAME=Default\n"
        "export OS_REGION_NAME=RegionOne\n"
    )
    path.chmod(0o600)
    return path
