"""Messages a person can read: what a user or a site file supplies is shown as written
(never read as console markup), and urgent drills say what they do. Real subprocesses,
as a person runs the commands."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli import MINIMAL_SITE, run_cli

URGENT = """
[urgent]
server = "https://127.0.0.1:9"
key_file = "site.key"
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, columns=200)


def test_what_users_and_site_files_supply_is_shown_as_written(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(MINIMAL_SITE)
    no_urgent = f"error: {cfg}: no [urgent] section: this site takes no urgent jobs\n"
    for command in (["urgent", "submit", "--urgency", "red", "--", "true"], ["urgent", "drill"]):
        out = run(*command[:2], "-c", str(cfg), *command[2:], cwd=tmp_path)
        assert (out.returncode, out.stderr) == (2, no_urgent), command
    assert not (tmp_path / "state").exists()  # a drill refused creates nothing

    missing = run("status", "-c", "[red]site.toml", cwd=tmp_path)
    assert missing.stderr.startswith("error: no configuration at [red]site.toml; pass --config")
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL_SITE.replace('"lab"', '"[bold]lab"'))
    refused = run("queue", "-c", str(bad), cwd=tmp_path)
    assert refused.stderr.endswith(": manager.site_id: must be 1-63 letters, digits, '.', '_' "
                                   "or '-' (got '[bold]lab')\n"), refused.stderr  # fmt: skip

    assert run("submit", "-c", str(cfg), "--", "echo", "[red]x[/red] :CD:", cwd=tmp_path).stdout
    queue = run("queue", "-c", str(cfg), cwd=tmp_path).stdout
    assert "echo '[red]x[/red] :CD:'" in queue, queue

    help_text = run("urgent", "drill", "--help", cwd=tmp_path).stdout
    assert "Its name in the history. Default: [urgent] resource." in help_text, help_text
    assert "every policy [urgent] policies maps an urgency to" in help_text


def test_a_drill_that_cannot_start_says_so_within_its_stated_timeout_and_cancels_its_job(
    tmp_path: Path,
) -> None:
    """No manager runs, so no worker ever comes for the drill's job."""
    cfg = tmp_path / "site.toml"
    cfg.write_text(MINIMAL_SITE + URGENT)
    out = run(
        "urgent", "drill", "-c", str(cfg), "-p", "next_to_run", "--start-timeout", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "drill: next_to_run on lab: job 1; waiting up to 1 s for it to start, 1800 s in all",
        "drill 1 (next_to_run): did not start within 1 s; cancelled",
    ]
    job = run("job", "-c", str(cfg), "1", cwd=tmp_path).stdout
    assert "  state       cancelled" in job, job
