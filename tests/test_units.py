"""The shipped systemd units verify with systemd-analyze and keep their hardening."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

UNITS = files("elasticsite").joinpath("systemd")
NAMES = ("elasticsite-manager@.service", "elasticsite-server.service", "elasticsite-agent.service")
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def install(tmp_path: Path, text_of: dict[str, str] | None = None) -> list[Path]:
    """The units as a site installs them, with ExecStart pointing at this environment's
    elasticsite (verify checks that the program exists) and the template instantiated."""
    program = Path(sys.executable).parent / "elasticsite"
    out = []
    for name in NAMES:
        text = (text_of or {}).get(name) or UNITS.joinpath(name).read_text()
        path = tmp_path / name.replace("@.", "@lab.")
        path.write_text(text.replace("/opt/elasticsite/bin/elasticsite", str(program)))
        out.append(path)
    return out


def verify(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, "verify", *map(str, paths)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@needs_analyze
def test_the_units_verify(tmp_path: Path) -> None:
    done = verify(install(tmp_path))
    assert done.returncode == 0, done.stderr
    mine = [line for line in done.stderr.splitlines() if "elasticsite" in line]
    assert mine == []


@needs_analyze
def test_a_broken_unit_does_not_verify(tmp_path: Path) -> None:
    name = "elasticsite-server.service"
    bad = UNITS.joinpath(name).read_text().replace("ExecStart=/opt", "ExecStart=opt")
    done = verify(install(tmp_path, {name: bad}))
    assert done.returncode != 0
    assert "elasticsite-server.service" in done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_every_unit_is_hardened(name: str) -> None:
    text = UNITS.joinpath(name).read_text()
    for line in ("NoNewPrivileges=yes", "PrivateTmp=yes", "UMask=0077", "StateDirectoryMode=0700"):
        assert line in text.splitlines()
    assert any(line.startswith("ProtectSystem=") for line in text.splitlines())
    assert any(line.startswith("StateDirectory=") for line in text.splitlines())
    assert "--log-format json" in text
    if name != "elasticsite-agent.service":  # the agent edits /etc/hosts: root, few caps
        assert "User=elasticsite" in text.splitlines()
        assert "ProtectSystem=strict" in text.splitlines()
        assert "CapabilityBoundingSet=" in text.splitlines()  # none at all


def test_the_bootstrap_installs_the_shipped_agent_unit() -> None:
    join = files("elasticsite").joinpath("clouds/templates/join.sh").read_text()
    assert 'joinpath("systemd/elasticsite-agent.service")' in join
    assert "elasticsite agent --userdata" not in join  # no second, unhardened copy
