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

import time
import urllib.parse
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.clouds.recorded_api import RecordedApi

RECORDED = Path(__file__).parent / "recorded" / "openstack"
USER, PASSWORD, PROJECT = "burst", "s3cret-burst-password", "science"
TOKEN = "gAAAAABrecordedtokenvalue0000000000000000"


class OpenStackServer(RecordedApi):
    """See the module docstring; ``url`` is its Keystone (``.../identity/v3``)."""

    def __init__(self) -> None:
        self.servers: dict[str, dict[str, Any]] = {}
        self.unplaceable = 0
        self.delay = 0.0
        super().__init__(RECORDED)
        self.url = f"{self.base}/identity/v3"

    # -- test controls ---------------------------------------------------------------

    def no_valid_host(self, servers: int = 1) -> None:
        with self.lock:
            self.unplaceable += servers

    # -- the API -------------------------------------------------------------------------

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        path = parsed.path.rstrip("/")
        body = self.body(req)
        op = self._operation(method, path)
        error = self.asked(op)
        time.sleep(self.delay)
        if error is not None:
            status, payload = self.recorded("errors.json")[error]
            self.reply(req, status, payload)
            return
        if op != "auth" and op != "discover" and req.headers.get("X-Auth-Token") != TOKEN:
            self.reply(req, 401, self.recorded("errors.json")["unauthorized"][1])
            return
        handler = getattr(self, f"_{op}", None)
        if handler is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": f"no {path}"}})
            return
        self.answer(
            req,
            lambda message: {"computeFault": {"code": 500, "message": message}},
            lambda: handler(req, path, parsed.query, body),
        )

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

    def _discover(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        name = {
            "/identity/v3": "identity_version.json",
            "/compute/v2.1": "compute_version.json",
            "/image": "image_versions.json",
        }.get(path)
        if name is None:
            self.reply(req, 404, {"itemNotFound": {"code": 404, "message": path}})
            return
        self.reply(req, 200, self.recorded(name, base=self.base))

    def _auth(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        identity = body.get("auth", {}).get("identity", {})
        user = identity.get("password", {}).get("user", {})
        if user.get("name") != USER or user.get("password") != PASSWORD:
            self.reply(req, 401, self.recorded("errors.json")["unauthorized"][1])
            return
        token = self.recorded("token.json", base=self.base)
        self.reply(req, 201, token, {"X-Subject-Token": TOKEN})

    def _flavor(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        flavors = self.recorded("flavors.json", base=self.base)["flavors"]
        key = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if key == "detail" or key == "flavors":
            self.reply(req, 200, {"flavors": flavors})
            return
        found = next((f for f in flavors if key == f["id"]), None)
        if found is None:
            self.reply(req, 404, self.recorded("errors.json")["flavor_not_found"][1])
        else:
            self.reply(req, 200, {"flavor": found})

    def _image(self, req: BaseHTTPRequestHandler, path: str, query: str, body: Any) -> None:
        images = self.recorded("images.json")["images"]
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
            f for f in self.recorded("flavors.json", base=self.base)["flavors"]
            if f["id"] == spec["flavorRef"]
        )  # fmt: skip
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        server = self.recorded(
            "server.json", base=self.base, id=sid, name=spec["name"], status="BUILD",
            image=spec["imageRef"], flavor=flavor["name"], created=now,
        )  # fmt: skip
        server["metadata"] = dict(spec.get("metadata") or {})
        server["user_data"] = spec.get("user_data")
        with self.lock:
            if self.unplaceable:
                self.unplaceable -= 1
                server["status"] = "ERROR"
                server["fault"] = self.recorded("errors.json", created=now)["no_valid_host"][1]
            self.servers[sid] = server
        self.reply(req, 202, self.recorded("server_created.json", base=self.base, id=sid))

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


def openstack_server() -> OpenStackServer:
    """A server to use in a ``with`` block, which closes it."""
    return OpenStackServer()


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
