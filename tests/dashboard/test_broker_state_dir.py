"""`elasticsite broker --dashboard SITE.toml` needs no --state-dir: the broker's state
goes into the site's state directory."""

from __future__ import annotations

import stat
from pathlib import Path

from tests.cli import run_command

from elasticsite.cli.broker import _state_dir


def _site(tmp_path: Path) -> Path:
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'[manager]\nstate_dir = "{tmp_path / "state"}"\n\n'
        '[[clouds]]\nname = "local"\nmax_instances = 1\n'
    )
    return cfg


def test_the_site_file_gives_the_broker_its_state_directory(tmp_path: Path) -> None:
    state = _state_dir(None, _site(tmp_path))
    assert state == (tmp_path / "state" / "broker").resolve()
    # The site's state directory exists and is private before the broker writes in it.
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert _state_dir(tmp_path / "given", _site(tmp_path)) == tmp_path / "given"


def test_without_a_state_directory_or_a_site_it_says_both_ways(tmp_path: Path) -> None:
    out = run_command("broker", "--port", "1", cwd=tmp_path)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--state-dir" in lines[0] and "--dashboard" in lines[0], lines
