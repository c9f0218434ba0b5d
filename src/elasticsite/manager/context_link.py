"""The manager's side of recontextualization: one context per site, kept across restarts.

At its first start the manager creates a context on the broker and keeps the
context's id, URI, key and secret in its state store (the broker shows the key and
secret only once; the store is readable by its owner alone). Every worker it launches
gets those coordinates in its user data (which the local cloud writes 0600); the
worker's agent joins and follows the context. When a worker is gone for good the
core records its node's departure, so the remaining nodes forget it even if the
instance died without leaving: the core keeps it pending (in its state, which the
manager's store persists) and sends it again at every step until :meth:`ContextLink.send`
gets it through.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from elasticsite.config import ConfigError, ContextConfig
from elasticsite.context.client import AdminClient, ContextError
from elasticsite.context.models import ContextPolicy
from elasticsite.context.validation import as_label
from elasticsite.manager.store import StateStore

log = logging.getLogger(__name__)

__all__ = ["ContextLink", "SavedContext", "saved_context"]

_KEYS = ("id", "uri", "key", "secret")


def _read_token(config: ContextConfig) -> str:
    """The broker's admin token; a token file others can read is warned about (it grants
    full control of the broker), not changed: the file is the administrator's."""
    if config.token_file:
        path = Path(config.token_file).expanduser()
        try:
            token = path.read_text().strip()
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError as exc:
            raise ConfigError(
                f"context.token_file: cannot read {config.token_file}: {exc.strerror or exc}"
            ) from None
        if mode & 0o077:
            log.warning(
                "context.token_file %s is readable by others (mode %04o); chmod 600 it",
                path,
                mode,
            )
    else:
        token = os.environ.get("ELASTICSITE_BROKER_TOKEN", "").strip()
    if not token:
        raise ConfigError(
            "context: no admin token for the broker (set context.token_file or "
            "$ELASTICSITE_BROKER_TOKEN)"
        )
    return token


class ContextLink:
    """The site's context on the broker, as the manager uses it."""

    def __init__(
        self,
        config: ContextConfig,
        store: StateStore,
        site_id: str,
        *,
        loopback_workers: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.loopback_workers = loopback_workers
        """Some workers live on this machine's loopback (the local cloud's do)."""
        self.name = config.name or site_id
        self.ca_pem: str | None = None
        if config.ca:
            try:
                self.ca_pem = Path(config.ca).expanduser().read_text()
            except OSError as exc:
                raise ConfigError(
                    f"context.ca: cannot read {config.ca}: {exc.strerror or exc}"
                ) from None
        # Short timeout: the manager asks from its loop and retries at the next step.
        self.client = AdminClient(config.broker, _read_token(config), ca=self.ca_pem, timeout=5.0)
        self.coordinates: dict[str, str] = {}

    def close(self) -> None:
        self.client.close()

    def ensure(self) -> dict[str, str]:
        """The context's coordinates for user data, creating the context if needed.

        Raises :class:`ContextError` if the broker cannot be reached or refuses.
        """
        saved = {k: self.store.get_meta(f"context.{k}") or "" for k in _KEYS}
        if all(saved.values()):
            try:
                self.client.show(saved["id"])
            except ContextError as exc:
                if exc.status != 404:
                    raise
                log.warning("context %s is gone from the broker; creating a new one", saved["id"])
            else:
                self.coordinates = self._userdata(saved)
                return self.coordinates
        created = self.client.create(self.name, self.policy())
        values = {
            "id": created.id,
            "uri": created.uri,
            "key": created.key,
            "secret": created.secret,
        }
        for k, v in values.items():
            self.store.set_meta(f"context.{k}", v)
        log.info("created context %s (%s) on %s", created.id, created.uri, self.config.broker)
        self.coordinates = self._userdata(values)
        return self.coordinates

    def policy(self) -> ContextPolicy:
        """The new context's admission rules: no worker may take this host's names
        (nor those the configuration reserves), and loopback addresses are taken only
        when workers live on loopback."""
        reserved: list[str] = []
        for name in (socket.gethostname(), socket.getfqdn(), *self.config.reserved):
            try:
                ContextPolicy(reserved=[name])
            except ValidationError:
                if name in self.config.reserved:
                    raise ConfigError(
                        f"context.reserved: {name!r} is neither a host name nor an address"
                    ) from None
                continue  # this host's name is not one a worker could take anyway
            if name not in reserved:
                reserved.append(name)
        return ContextPolicy(
            reserved=reserved[:64],
            replace_on_rejoin=self.config.replace_on_rejoin,
            allow_loopback=self.loopback_workers,
        )

    def _userdata(self, values: dict[str, str]) -> dict[str, str]:
        out = {
            "context_uri": values["uri"],
            "context_key": values["key"],
            "context_secret": values["secret"],
        }
        if self.ca_pem:
            out["context_ca"] = self.ca_pem
        return out

    @property
    def context_id(self) -> str | None:
        return self.store.get_meta("context.id")

    def send(self, host: str) -> None:
        """Tell the broker that ``host`` (a worker's node name) left (network only: runs
        on the manager's pool). Workers publish their node name as a host-name label
        (``as_label``), so that is the name the broker is given.

        Raises :class:`ContextError` when the broker cannot be reached or refuses; a
        host it does not know (already left, or never joined) counts as done."""
        cid = self.context_id
        if cid is None:
            return
        host = as_label(host)
        try:
            self.client.remove_host(cid, host)
            log.info("context %s: %s removed", cid, host)
        except ContextError as exc:
            if exc.status != 404:
                raise


@dataclass(frozen=True, slots=True)
class SavedContext:
    """The site's context as its state store keeps it: where it lives, and the
    departures (node names) the broker has not yet recorded."""

    uri: str
    pending_removals: list[str]


def saved_context(store: StateStore) -> SavedContext | None:
    """The context the manager created for this site, read from ``store`` alone (no
    broker, no admin token: what ``elasticsite status`` shows); None before the
    manager first created one."""
    uri = store.get_meta("context.uri")
    if not uri:
        return None
    return SavedContext(uri, list(store.departures()))
