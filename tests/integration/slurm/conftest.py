"""A real single-machine Slurm for the adapter's integration tests.

The session fixture installs Slurm if needed (``scripts/slurm/install.sh``, root and
Debian packages), starts it with ``scripts/slurm/start.sh`` and, at the end, stops
with ``scripts/slurm/stop.sh`` only what it started: a Slurm that was already up
is left running, and stop.sh itself leaves running a Slurm that another live
process started it for (start.sh records each caller as a holder). Without root,
or when the packages cannot be installed, every test here is skipped with the reason.

Tests cancel only the jobs they submitted and delete only the nodes they created
(named ``t-...``), so another user of the same Slurm is left alone.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, TypeVar

import pytest
from tests import waiting

from elasticsite.batch.base import BatchView, JobRequest, Node
from elasticsite.batch.slurm import SlurmBatch

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "slurm"
RUN_DIR = Path(os.environ.get("ELASTICSITE_SLURM_RUN_DIR", "/run/elasticsite-slurm"))
LOG_DIR = Path(os.environ.get("ELASTICSITE_SLURM_LOG_DIR", "/var/log/elasticsite-slurm"))
TEST_NODE_PREFIX = "t-"
"""Dynamic nodes the tests create are named t-...; cleanup deletes them."""
_names = itertools.count(1)


def fresh_node_name(label: str) -> str:
    """A dynamic node name never used before on this Slurm.

    Slurm 22.05's slurmctld was seen to crash (core dump) on ``scontrol create node``
    reusing the name of a dynamic node deleted moments before while a requeued or
    cancelled job still remembered it; real cloud workers get fresh names too.
    """
    return f"{TEST_NODE_PREFIX}{label}-{os.getpid() % 100000}-{next(_names)}"


T = TypeVar("T")

pytestmark = pytest.mark.slow

_HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here shares the one slurmctld (and cleans up its t-* nodes and the
    drained ``localhost``): they are ``serial`` and ``slurm`` (scripts/test.sh runs them
    one at a time beside the parallel part), and under ``pytest -n N --dist loadgroup``
    in one worker."""
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.xdist_group("slurm"))
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.slurm)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """slurmctld 22.05 (Debian's) can die with SIGSEGV in ``create_nodes`` when a dynamic
    node registers soon after others were deleted (a core in its log directory shows
    it). A test here that fails while the controller died under it is the daemon's
    crash, not the adapter's: the controller is started again and the test run once
    more, with a warning naming the crash; any other failure stands."""
    if _HERE not in item.path.resolve().parents:
        return None
    holders = RUN_DIR / "holders"
    if not _controller_running() and holders.is_dir() and any(holders.iterdir()):
        _script("start.sh")  # it died in an earlier test's teardown: this test needs it
    if not _controller_running():
        return None
    from _pytest.runner import runtestprotocol

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    if any(r.failed for r in reports) and not _controller_running():
        started = _script("start.sh")
        item.warn(pytest.PytestWarning(
            "slurmctld died during this test (see its core and slurmctld.log in "
            f"{LOG_DIR}); started again ({started.returncode}) and the test run once more"
        ))  # fmt: skip
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _script(name: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _controller_running() -> bool:
    try:
        pid = int((RUN_DIR / "slurmctld.pid").read_text())
        return "slurmctld" in os.readlink(f"/proc/{pid}/exe")
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    """The running test Slurm; yields the scripts folder."""
    if os.geteuid() != 0:
        pytest.skip("real Slurm tests need root (they install and start slurmctld/slurmd)")
    if shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        installed = _script("install.sh", timeout=600)
        if installed.returncode != 0:
            pytest.skip(
                "cannot install Slurm (scripts/slurm/install.sh): "
                + (installed.stderr.strip() or installed.stdout.strip())[-300:]
            )
    already = _controller_running()
    started = _script("start.sh")  # records this process as a holder
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm/start.sh failed:\n{started.stdout}\n{started.stderr}")
    try:
        yield SCRIPTS
    finally:
        if already:
            (RUN_DIR / "holders" / str(os.getpid())).unlink(missing_ok=True)
        else:
            _script("stop.sh")  # stops nothing while another holder still uses it


def wait_for(check: Callable[[], T | None], timeout: float = 90.0, what: str = "") -> T:
    """Poll ``check`` every 0.2 s until it returns something truthy. The timeout bounds a
    hang: with both cores busy, slurmctld's next scheduling pass (a job starting on an
    undrained node) came more than 20 s later."""
    return waiting.wait_for(check, timeout, what or str(check), every=0.2)


def powered_down_cloud_node(timeout: float = 150.0) -> str:
    """A node of the ``cloud`` partition that is powered down (``idle~``), waited for: one
    an earlier test powered up is powered down after SuspendTime (30 s) idle and is
    ``idle%`` for SuspendTimeout (30 s) more, when Slurm gives it no job."""

    def down() -> str | None:
        shown = subprocess.run(
            ["sinfo", "-h", "-N", "-p", "cloud", "-o", "%N %t"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return next((ln.split()[0] for ln in shown.splitlines() if ln.endswith(" idle~")), None)

    return wait_for(down, timeout, "a powered-down cloud node")


def node(view: BatchView, name: str) -> Node | None:
    return next((n for n in view.nodes if n.name == name), None)


class TrackedSlurm(SlurmBatch):
    """The adapter, remembering every job it submitted so cleanup cancels just those."""

    submitted: ClassVar[set[str]] = set()

    def submit(self, request: JobRequest) -> str:
        job_id = super().submit(request)
        TrackedSlurm.submitted.add(job_id)
        return job_id


def _cleanup(batch: SlurmBatch) -> None:
    mine = sorted(TrackedSlurm.submitted)
    if mine:
        # queued ones first: a job started by the blocker's end and cancelled at once
        # leaves a launch request that holds up slurmctld's next launches for seconds
        subprocess.run(["scancel", "--state=PENDING", *mine], check=False, capture_output=True)
        subprocess.run(["scancel", *mine], check=False, capture_output=True)
    for entry in RUN_DIR.glob(f"dyn-{TEST_NODE_PREFIX}*.idx"):
        _script("dynnode.sh", "stop", entry.name[4:-4], "--delete")
    wait_for(
        lambda: not {j.id for j in batch.snapshot().running} & set(mine),
        30,
        "every test job to end",
    )
    TrackedSlurm.submitted.clear()
    for n in batch.snapshot().nodes:
        if n.name.startswith(TEST_NODE_PREFIX):
            batch.remove_node(n.name)
    subprocess.run(
        ["scontrol", "update", "nodename=localhost", "state=undrain"],
        check=False,
        capture_output=True,
    )


def tracked(partition: str | None = None) -> SlurmBatch:
    """An adapter submitting to ``partition`` whose jobs the cleanup cancels."""
    return TrackedSlurm(partition=partition, include_held=True)


@pytest.fixture
def slurm(slurm_cluster: Path) -> Iterator[SlurmBatch]:
    """An adapter on the real Slurm; the test's jobs and t-* nodes are gone afterwards."""
    batch = tracked()
    _cleanup(batch)
    yield batch
    _cleanup(batch)


@pytest.fixture(scope="session")
def local_cores(slurm_cluster: Path) -> int:
    """Cores of the static node ``localhost`` (the machine's)."""
    view = SlurmBatch().snapshot()
    found = node(view, "localhost")
    assert found is not None
    return found.cores
