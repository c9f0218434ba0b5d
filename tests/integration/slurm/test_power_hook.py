"""scripts/slurm/power.sh hands Slurm's power requests to elasticsite when power.env exists.

Run the way slurmctld runs it: through the ``power-<action>`` link, one host-list
argument, file descriptors 0-2 closed and every signal blocked. A private run
directory keeps this away from the shared test Slurm.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "slurm"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("perl") is None, reason="needs bash and perl"
)


def _as_slurmctld(link: Path, nodelist: str, env: dict[str, str]) -> int:
    def closed_fds_blocked_signals() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
        for fd in (0, 1, 2):
            os.close(fd)

    proc = subprocess.Popen(
        [str(link), nodelist], env=env, preexec_fn=closed_fds_blocked_signals, close_fds=True
    )
    return proc.wait(timeout=30)


@pytest.mark.parametrize("action", ["resume", "suspend", "fail"])
def test_power_env_hands_the_request_to_elasticsite(tmp_path: Path, action: str) -> None:
    run_dir, log_dir = tmp_path / "run", tmp_path / "log"
    run_dir.mkdir()
    log_dir.mkdir()
    seen = tmp_path / "seen"
    fake = tmp_path / "elasticsite"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import os, sys\n"
        "status = open('/proc/self/status').read().splitlines()\n"
        "blocked = next(line for line in status if line.startswith('SigBlk'))\n"
        "fds = ' '.join(sorted(os.listdir('/proc/self/fd'), key=int)[:3])\n"
        f"open({str(seen)!r}, 'w').write('\\n'.join([' '.join(sys.argv[1:]), "
        "'cfg=' + os.environ['ELASTICSITE_CONFIG'] + ' extra=' + os.environ['EXTRA'], "
        "blocked, fds]) + '\\n')\n"
    )
    fake.chmod(0o755)
    (run_dir / "power.env").write_text(
        f"ELASTICSITE_BIN={fake}\nELASTICSITE_CONFIG=/etc/site.toml\nEXTRA=yes\n"
    )
    link = run_dir / f"power-{action}"
    link.symlink_to(SCRIPTS / "power.sh")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "ELASTICSITE_SLURM_RUN_DIR": str(run_dir),
        "ELASTICSITE_SLURM_LOG_DIR": str(log_dir),
    }
    assert _as_slurmctld(link, "cloud[1-2]", env) == 0
    args, variables, sigblk, fds = seen.read_text().splitlines()
    assert args == f"slurm {action} -c /etc/site.toml cloud[1-2]"
    assert variables == "cfg=/etc/site.toml extra=yes"
    assert sigblk.split()[1] == "0000000000000000"  # signals unblocked for elasticsite
    assert fds.split() == ["0", "1", "2"]  # valid stdin/stdout/stderr
    assert f"{action} cloud[1-2]" in (log_dir / "power.log").read_text()


def test_power_env_without_the_binary_fails_clearly(tmp_path: Path) -> None:
    run_dir, log_dir = tmp_path / "run", tmp_path / "log"
    run_dir.mkdir()
    log_dir.mkdir()
    (run_dir / "power.env").write_text("ELASTICSITE_CONFIG=/etc/site.toml\n")
    result = subprocess.run(
        ["bash", str(SCRIPTS / "power.sh"), "resume", "cloud1"],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ELASTICSITE_SLURM_RUN_DIR": str(run_dir),
            "ELASTICSITE_SLURM_LOG_DIR": str(log_dir),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "power.env must set ELASTICSITE_BIN" in (log_dir / "power.log").read_text()
