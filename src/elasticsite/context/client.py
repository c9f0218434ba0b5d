"""Clients of the broker: :class:`AdminClient` for contexts, :class:`NodeClient` (and
:class:`AsyncNodeClient`) for a node's join, update, leave and long polls.

Every failure is a :class:`ContextError` carrying the HTTP status and the broker's
one-line detail; a broker that cannot be reached raises :class:`BrokerUnavailable`
(status None), which an agent retries with its last applied id.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote, urlsplit

import httpx

from elasticsite.context.models import (
    Challenge,
    ContextCreated,
    ContextPolicy,
    ContextSummary,
    JoinResult,
    Members,
    NodeIn,
    Updates,
)

__all__ = [
    "AdminClient",
    "AsyncNodeClient",
    "BrokerUnavailable",
    "ContextError",
    "NodeClient",
    "split_context_uri",
    "tls_context",
]

_TIMEOUT = 10.0
"""Seconds to wait for the broker beyond any long poll asked for."""


class ContextError(Exception):
    """The broker refused a request, or could not be reached.

    ``status`` is the HTTP status (None when no answer came), ``detail`` the broker's
    one-line reason, ``last_id`` the context's last id on a ``409``, ``challenge`` what
    to sign with the host key to replace a member (a ``409`` to a join).
    """

    def __init__(
        self,
        status: int | None,
        detail: str,
        *,
        last_id: int | None = None,
        challenge: Challenge | None = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.last_id = last_id
        self.challenge = challenge
        super().__init__(f"{status}: {detail}" if status is not None else detail)


class BrokerUnavailable(ContextError):
    """No answer from the broker (connection refused or reset, timeout, TLS failure)."""

    def __init__(self, detail: str) -> None:
        super().__init__(None, detail)


CA = str | Path | ssl.SSLContext | None


def tls_context(ca: CA) -> ssl.SSLContext | bool:
    """What to check the broker's certificate against: a PEM file (``Path`` or a path
    string), PEM text (a string holding ``-----BEGIN``), a ready ``SSLContext`` (shared
    by many clients, as building one costs a millisecond), or None for the system store."""
    if ca is None:
        return True
    if isinstance(ca, ssl.SSLContext):
        return ca
    if isinstance(ca, str) and "-----BEGIN" in ca:
        return ssl.create_default_context(cadata=ca)
    try:
        return ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ContextError(None, f"cannot use {ca} as the broker's CA: {exc}") from None


def split_context_uri(uri: str) -> tuple[str, str]:
    """``https://host:port/ctx/<id>`` → (``https://host:port``, ``<id>``)."""
    parts = urlsplit(uri)
    path = parts.path.rstrip("/")
    head, sep, cid = path.rpartition("/ctx/")
    if not sep or not cid or "/" in cid or parts.scheme not in ("http", "https"):
        raise ContextError(None, f"{uri!r} is not a context URI (https://host:port/ctx/<id>)")
    return f"{parts.scheme}://{parts.netloc}{head}", cid


def _error(response: httpx.Response) -> ContextError:
    detail, last_id, challenge = response.reason_phrase or "error", None, None
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        if text:
            detail = text.splitlines()[0][:200]
    else:
        if isinstance(body, Mapping):
            detail = str(body.get("detail", detail))
            if isinstance(body.get("last_id"), int):
                last_id = body["last_id"]
            with contextlib.suppress(ValueError):
                challenge = Challenge.model_validate(body.get("challenge"))
    return ContextError(response.status_code, detail, last_id=last_id, challenge=challenge)


def _unavailable(url: str, exc: httpx.HTTPError) -> BrokerUnavailable:
    reason = str(exc) or type(exc).__name__
    return BrokerUnavailable(f"no answer from the broker at {url}: {reason}")


def _checked(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        raise _error(response)
    return response


def _node_body(node: NodeIn | Mapping[str, Any]) -> dict[str, Any]:
    return node.model_dump() if isinstance(node, NodeIn) else dict(node)


class _Sync:
    """One httpx client, closed with the object; every failure a :class:`ContextError`."""

    _http: httpx.Client
    url: str

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unavailable(self.url, exc) from None
        return _checked(response)


class AdminClient(_Sync):
    """An administrator's view of a broker (bearer token)."""

    def __init__(
        self, broker_url: str, token: str, *, ca: CA = None, timeout: float = _TIMEOUT
    ) -> None:
        self.url = broker_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            verify=tls_context(ca),
            timeout=timeout,
        )

    def create(self, name: str = "", policy: ContextPolicy | None = None) -> ContextCreated:
        """A new context, with its admission rules; its key and secret are only in
        this answer."""
        body: dict[str, object] = {"name": name}
        if policy is not None:
            body.update(policy.model_dump(mode="json", exclude_defaults=True))
        r = self._request("POST", "/ctx", json=body)
        return ContextCreated.model_validate_json(r.content)

    def list(self) -> list[ContextSummary]:
        r = self._request("GET", "/ctx")
        return [ContextSummary.model_validate(c) for c in r.json()]

    def show(self, context_id: str) -> ContextSummary:
        r = self._request("GET", f"/ctx/{quote(context_id, safe='')}")
        return ContextSummary.model_validate_json(r.content)

    def delete(self, context_id: str) -> None:
        self._request("DELETE", f"/ctx/{quote(context_id, safe='')}")

    def members(self, context_id: str) -> Members:
        r = self._request("GET", f"/ctx/{quote(context_id, safe='')}/members")
        return Members.model_validate_json(r.content)

    def remove_node(self, context_id: str, node_id: str) -> int:
        """Record that node ``node_id`` left; returns the entry id."""
        cid, nid = quote(context_id, safe=""), quote(node_id, safe="")
        r = self._request("DELETE", f"/ctx/{cid}/nodes/{nid}")
        return int(r.json()["entry_id"])

    def remove_host(self, context_id: str, short_hostname: str) -> int:
        """Record that the member named ``short_hostname`` left; returns the entry id."""
        cid, host = quote(context_id, safe=""), quote(short_hostname, safe="")
        r = self._request("DELETE", f"/ctx/{cid}/hosts/{host}")
        return int(r.json()["entry_id"])


class _NodeBase:
    """What the sync and async node clients share: URLs and which credential to use."""

    def __init__(
        self,
        context_uri: str,
        key: str,
        secret: str,
        *,
        node_id: str | None = None,
        node_secret: str | None = None,
    ) -> None:
        self.base_url, self.context_id = split_context_uri(context_uri)
        self.context_uri = context_uri
        self._key, self._secret = key, secret
        self.node_id = node_id
        self.node_secret = node_secret

    @property
    def _path(self) -> str:
        return f"/ctx/{quote(self.context_id, safe='')}"

    def _context_auth(self) -> tuple[str, str]:
        return self._key, self._secret

    def _auth(self) -> tuple[str, str]:
        """The node's own credential once joined, else the context's."""
        if self.node_id and self.node_secret:
            return self.node_id, self.node_secret
        return self._key, self._secret

    def _node_path(self) -> str:
        if not self.node_id:
            raise ContextError(None, "this client has not joined the context yet")
        return f"{self._path}/nodes/{quote(self.node_id, safe='')}"

    def _joined(self, response: httpx.Response) -> JoinResult:
        result = JoinResult.model_validate_json(response.content)
        self.node_id, self.node_secret = result.node_id, result.node_secret
        return result

    @staticmethod
    def _params(since: int, wait: float) -> dict[str, str]:
        return {"since": str(since), "wait": repr(float(wait))}

    @staticmethod
    def _timeout(wait: float) -> httpx.Timeout:
        return httpx.Timeout(_TIMEOUT, read=wait + _TIMEOUT)


class NodeClient(_NodeBase, _Sync):
    """A node of one context: join, update, leave, and fetch updates (synchronous)."""

    def __init__(
        self,
        context_uri: str,
        key: str,
        secret: str,
        *,
        ca: CA = None,
        node_id: str | None = None,
        node_secret: str | None = None,
    ) -> None:
        super().__init__(context_uri, key, secret, node_id=node_id, node_secret=node_secret)
        self.url = self.base_url
        self._http = httpx.Client(base_url=self.base_url, verify=tls_context(ca), timeout=_TIMEOUT)

    def join(self, node: NodeIn | Mapping[str, Any]) -> JoinResult:
        """Join with the context's key and secret; remembers the node credential."""
        r = self._request(
            "POST", f"{self._path}/nodes", json=_node_body(node), auth=self._context_auth()
        )
        return self._joined(r)

    def update(self, node: NodeIn | Mapping[str, Any]) -> int:
        """Replace this node's record; returns the id of the new join entry."""
        r = self._request("PUT", self._node_path(), json=_node_body(node), auth=self._auth())
        return int(r.json()["entry_id"])

    def leave(self) -> int:
        """Leave the context; returns the id of the leave entry."""
        r = self._request("DELETE", self._node_path(), auth=self._auth())
        return int(r.json()["entry_id"])

    def updates(self, since: int, wait: float = 0) -> Updates:
        """Entries after ``since`` (or a snapshot), waiting up to ``wait`` s for one."""
        r = self._request(
            "GET",
            f"{self._path}/updates",
            params=self._params(since, wait),
            auth=self._auth(),
            timeout=self._timeout(wait),
        )
        return Updates.model_validate_json(r.content)

    def members(self) -> Members:
        r = self._request("GET", f"{self._path}/members", auth=self._auth())
        return Members.model_validate_json(r.content)


class AsyncNodeClient(_NodeBase):
    """:class:`NodeClient` for asyncio, on httpx (``http`` may be shared between
    clients; it then needs a connection for each long poll waiting at once)."""

    def __init__(
        self,
        context_uri: str,
        key: str,
        secret: str,
        *,
        ca: CA = None,
        node_id: str | None = None,
        node_secret: str | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(context_uri, key, secret, node_id=node_id, node_secret=node_secret)
        self._verify = tls_context(ca)
        self._shared_http = http
        self._own_http: httpx.AsyncClient | None = None

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._shared_http is not None:
            return self._shared_http
        if self._own_http is None:  # made on first use
            self._own_http = httpx.AsyncClient(verify=self._verify, timeout=_TIMEOUT)
        return self._own_http

    async def __aenter__(self) -> AsyncNodeClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http is not None:
            await self._own_http.aclose()
            self._own_http = None

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, self.base_url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise _unavailable(self.base_url, exc) from None
        return _checked(response)

    async def join(self, node: NodeIn | Mapping[str, Any]) -> JoinResult:
        r = await self._request(
            "POST", f"{self._path}/nodes", json=_node_body(node), auth=self._context_auth()
        )
        return self._joined(r)

    async def update(self, node: NodeIn | Mapping[str, Any]) -> int:
        r = await self._request("PUT", self._node_path(), json=_node_body(node), auth=self._auth())
        return int(r.json()["entry_id"])

    async def leave(self) -> int:
        r = await self._request("DELETE", self._node_path(), auth=self._auth())
        return int(r.json()["entry_id"])

    async def updates(self, since: int, wait: float = 0) -> Updates:
        r = await self._request(
            "GET",
            f"{self._path}/updates",
            params=self._params(since, wait),
            auth=self._auth(),
            timeout=self._timeout(wait),
        )
        return Updates.model_validate_json(r.content)

    async def members(self) -> Members:
        r = await self._request("GET", f"{self._path}/members", auth=self._auth())
        return Members.model_validate_json(r.content)
