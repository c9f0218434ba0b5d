"""The local cloud's files that carry secrets: user data, SSH host keys, logs."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elasticsite.clouds.base import WORKER_TAG, LaunchRequest
from elasticsite.clouds.local import LocalCloud
from elasticsite.clouds.local_agent import host_key
from elasticsite.model import VMType


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_user_data_is_private_and_replaced_whole(make_cloud: Callable[..., LocalCloud]) -> None:
    cloud = make_cloud()
    state = cloud.state_dir
    assert [mode(state / d) for d in ("", "userdata", "logs", "jobs")] == [0o700] * 4
    # A file left by an earlier instance of the same name, readable by everyone.
    stale = state / "userdata" / "w1.json"
    stale.write_text('{"old": "1"}')
    assert mode(stale) == 0o644
    secret = {"context_secret": "s3cr3t", "node": "w1"}
    cloud.launch(LaunchRequest(VMType("small"), ["w1"], secret, {WORKER_TAG: "w1"}))
    assert '"s3cr3t"' in stale.read_text() and mode(stale) == 0o600
    assert [p.name for p in (state / "userdata").iterdir()] == ["w1.json"]  # no temp left
    assert mode(state / "logs" / "w1.log") == 0o600  # opened before the worker starts
    assert mode(cloud.db_path) == 0o600


def test_an_instance_host_key_is_private(tmp_path: Path) -> None:
    root = tmp_path / "agents" / "n1"
    line = host_key(root, "n1")
    assert line.startswith("ssh-ed25519 ") and line.endswith(" root@n1")
    ssh = root / "etc" / "ssh"
    assert mode(ssh) == 0o700
    assert mode(ssh / "ssh_host_ed25519_key") == 0o600
    assert b"OPENSSH PRIVATE KEY" in (ssh / "ssh_host_ed25519_key").read_bytes()
    assert sorted(p.name for p in ssh.iterdir()) == [
        "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub",
    ]
    # A key an older version left readable is tightened; the key itself is kept.
    (ssh / "ssh_host_ed25519_key").chmod(0o644)
    assert host_key(root, "n1") == line
    assert mode(ssh / "ssh_host_ed25519_key") == 0o600
