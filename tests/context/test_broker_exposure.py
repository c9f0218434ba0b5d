"""What the broker leaves open besides its API: the admin token's file on disk, and the
API's own description over the network.

The broker runs as ``elasticsite broker``, a real process on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
from pathlib import Path

import httpx
import pytest

from elasticsite.context.auth import load_admin_token

from .conftest import BrokerProcess, free_port

pytestmark = pytest.mark.slow

DESCRIPTION = ("/openapi.json", "/docs", "/redoc")


def get(broker: BrokerProcess, path: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    verify = ssl.create_default_context(cafile=str(broker.cert))
    return httpx.get(f"{broker.url}{path}", headers=headers, verify=verify, timeout=10).status_code


def test_a_loose_admin_token_is_tightened_and_the_api_description_is_not_served(
    tmp_path: Path,
) -> None:
    """An admin.token left readable by the group and the world (a restore from a
    backup, a hand-made file) is made 0600 with a warning, and the token still works;
    a stranger, and even the administrator, find no /openapi.json, /docs or /redoc."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    token = "an-admin-token-restored-from-a-backup"
    (state / "admin.token").write_text(token + "\n")
    os.chmod(state / "admin.token", 0o644)
    broker = BrokerProcess(state, free_port())
    broker.start()
    try:
        assert stat.S_IMODE((state / "admin.token").stat().st_mode) == 0o600
        with broker.admin() as admin:
            assert admin.list() == []
        for path in DESCRIPTION:
            assert get(broker, path) == 404, path
            assert get(broker, path, token) == 404, path
        assert get(broker, "/healthz") == 200
    finally:
        _, err = broker.terminate()
    assert f"{state / 'admin.token'} was mode 0644, readable by others; tightened" in err


def test_docs_serves_the_api_description(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "state", free_port(), extra=("--docs",))
    broker.start()
    try:
        for path in DESCRIPTION:
            assert get(broker, path) == 200, path
    finally:
        broker.terminate()


def test_an_operators_token_file_readable_by_others_is_warned_about_not_changed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--admin-token-file is the operator's own file, perhaps shared with a group on
    purpose: it is not changed, but the operator is told."""
    caplog.set_level(logging.WARNING, logger="elasticsite.context.auth")
    token_file = tmp_path / "token"
    token_file.write_text("an-admin-token-the-operator-keeps\n")
    os.chmod(token_file, 0o640)
    token, source = load_admin_token(tmp_path / "state", token_file)
    assert (token, source) == ("an-admin-token-the-operator-keeps", str(token_file))
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o640
    assert [r.getMessage() for r in caplog.records] == [
        f"{token_file} is mode 0640, readable by others: whoever reads it administers the "
        "broker; chmod 600 it"
    ]
    caplog.clear()
    os.chmod(token_file, 0o600)
    load_admin_token(tmp_path / "state", token_file)
    assert caplog.records == []
