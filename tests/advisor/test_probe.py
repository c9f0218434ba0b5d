"""Staging probes against a real HTTP server on 127.0.0.1 and real commands."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from elasticsite.advisor.probe import ProbeError, probe, run_probes
from elasticsite.config.advisor import AdvisorConfig, AdvisorRepository
from elasticsite.history.observations import HistoryStore, ProbeFailure

FILE_SIZE = 1 << 20
PLAIN_SIZE = 256 << 20
"""Larger than any socket buffer, so a transfer cut short shows in what was sent."""


class Repository:
    """Files served over HTTP: ``/data`` (FILE_SIZE bytes) honours Range, ``/plain``
    (PLAIN_SIZE bytes) ignores it, ``/short`` is 1,000 bytes, anything else is 404."""

    def __init__(self) -> None:
        self.ranges: list[str | None] = []
        self.sent: list[int] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.ranges.append(self.headers.get("Range"))
                size = {"/data": FILE_SIZE, "/plain": PLAIN_SIZE, "/short": 1000}.get(self.path)
                if size is None:
                    self.send_error(404)
                    return
                status = 200
                wanted = re.fullmatch(r"bytes=0-(\d+)", self.headers.get("Range") or "")
                if self.path == "/data" and wanted:
                    size, status = min(size, int(wanted[1]) + 1), 206
                self.send_response(status)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                block = bytes(range(256)) * 256
                try:
                    for at in range(0, size, len(block)):
                        chunk = block[: min(len(block), size - at)]
                        self.wfile.write(chunk)
                        owner.sent.append(len(chunk))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the probe stops reading once it has its bytes

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[Repository]:
    repo = Repository()
    yield repo
    repo.close()


def clock() -> float:
    return 1_700_000_000.0


def test_an_http_probe_fetches_the_configured_bytes_with_a_range_request(
    server: Repository,
) -> None:
    repo = AdvisorRepository(name="archive", url=f"{server.url}/data", bytes=300_000)
    obs = probe(repo, resource="hpc", clock=clock)
    assert server.ranges == ["bytes=0-299999"]
    assert (obs.phase, obs.resource, obs.repository, obs.nbytes) == (
        "probe",
        "hpc",
        "archive",
        300_000,
    )
    assert obs.value > 0 and obs.at == clock() and obs.source == "probe"


def test_a_server_that_ignores_the_range_is_read_only_for_the_bytes_wanted(
    server: Repository,
) -> None:
    repo = AdvisorRepository(name="plain", url=f"{server.url}/plain", bytes=100_000)
    obs = probe(repo, resource="hpc", clock=clock)
    assert obs.nbytes == 100_000
    assert sum(server.sent) < PLAIN_SIZE  # the transfer was cut, not read to the end


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/short", "/short: the body ended after 1000 of 4096 bytes"),
        ("/missing", "/missing answered HTTP 404"),
    ],
)
def test_a_failed_http_probe_says_why(server: Repository, path: str, message: str) -> None:
    repo = AdvisorRepository(name="r", url=f"{server.url}{path}", bytes=4096)
    with pytest.raises(ProbeError) as info:
        probe(repo, resource="hpc")
    assert str(info.value) == f"{server.url}{message}"


def test_nothing_listening_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    repo = AdvisorRepository(name="gone", url="http://127.0.0.1:9/x", bytes=10, timeout=5)
    with pytest.raises(ProbeError, match=r"http://127\.0\.0\.1:9/x: ConnectError"):
        probe(repo, resource="hpc")


SCRIPT = """\
import os, sys, pathlib
out = pathlib.Path(sys.argv[1])
out.write_text("|".join([
    os.environ["ELASTICSITE_PROBE_REPOSITORY"],
    os.environ["ELASTICSITE_PROBE_BYTES"],
    os.environ.get("ELASTICSITE_PROBE_URL", "-"),
    sys.argv[2],
]))
sys.stdout.write("x" * 100000)
"""


def test_a_command_probe_runs_an_argument_list_with_the_repository_in_its_environment(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "seen"
    hostile = "; touch pwned; $(touch pwned2)"
    repo = AdvisorRepository(
        name="gridftp",
        command=[sys.executable, "-c", SCRIPT, str(seen), hostile],
        bytes=2048,
    )
    obs = probe(repo, resource="hpc", clock=clock)
    assert seen.read_text() == f"gridftp|2048|-|{hostile}"
    assert not (tmp_path / "pwned").exists() and not Path("pwned2").exists()
    assert (obs.repository, obs.nbytes, obs.at) == ("gridftp", 2048, clock())
    assert obs.value > 0


def test_a_failing_command_reports_its_exit_code_and_stderr() -> None:
    code = (
        "import sys; sys.stderr.write('globus-url-copy: error: 530\\n  login incorrect'); exit(3)"
    )
    repo = AdvisorRepository(name="g", command=[sys.executable, "-c", code], bytes=10)
    with pytest.raises(ProbeError) as info:
        probe(repo, resource="hpc")
    assert str(info.value) == (
        f"{sys.executable} exited with code 3: globus-url-copy: error: 530 login incorrect"
    )
    missing = AdvisorRepository(name="m", command=["/nonexistent/gridftp-probe"], bytes=10)
    with pytest.raises(ProbeError, match=r"cannot run /nonexistent/gridftp-probe: No such file"):
        probe(missing, resource="hpc")


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    repo = AdvisorRepository(name="slow", command=[sys.executable, "-c", code], timeout=1)
    with pytest.raises(ProbeError, match=r"did not finish within 1 s"):
        probe(repo, resource="hpc")
    child = int(pids.read_text())
    for _ in range(200):  # the kill is delivered; reaping by init may take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:
            if fh.read().split()[2] == "Z":
                break
        threading.Event().wait(0.05)
    else:
        pytest.fail(f"the probe's child {child} survived the timeout")


def test_run_probes_once_records_successes_and_failures_and_goes_on(
    server: Repository, tmp_path: Path
) -> None:
    config = AdvisorConfig(
        repositories=[
            AdvisorRepository(name="archive", url=f"{server.url}/data", bytes=50_000),
            AdvisorRepository(name="broken", url=f"{server.url}/missing", bytes=50_000),
            AdvisorRepository(name="gridftp", command=[sys.executable, "-c", "pass"], bytes=10),
        ]
    )
    store = HistoryStore(tmp_path / "advisor.db")
    seen: list[str] = []
    outcomes = run_probes(
        config,
        store,
        resource="hpc",
        clock=clock,
        once=True,
        report=lambda o: seen.append(o.repository),
    )
    assert seen == ["archive", "broken", "gridftp"]
    assert [(o.repository, o.observation is not None) for o in outcomes] == [
        ("archive", True),
        ("broken", False),
        ("gridftp", True),
    ]
    assert [(o.repository, o.nbytes) for o in store.observations("probe")] == [
        ("archive", 50_000),
        ("gridftp", 10),
    ]
    assert store.probe_failures() == [
        ProbeFailure("broken", clock(), f"{server.url}/missing answered HTTP 404")
    ]


def test_the_loop_probes_each_repository_at_its_own_period(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    ok = [sys.executable, "-c", "pass"]
    config = AdvisorConfig(
        repositories=[
            AdvisorRepository(name="fast", command=ok, bytes=1, period=60),
            AdvisorRepository(name="slow", command=ok, bytes=1, period=150),
        ]
    )
    store = HistoryStore(tmp_path / "advisor.db")
    order: list[tuple[str, float]] = []
    run_probes(
        config,
        store,
        resource="hpc",
        clock=lambda: now[0],
        monotonic=lambda: now[0],
        sleep=sleep,
        rounds=7,
        report=lambda o: order.append((o.repository, now[0])),
    )
    assert order == [
        ("fast", 0),
        ("slow", 0),
        ("fast", 60),
        ("fast", 120),
        ("slow", 150),
        ("fast", 180),
        ("fast", 240),
    ]
    assert store.count("probe") == 7


def test_probing_needs_a_repository(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no \[\[advisor\.repositories\]\] to probe"):
        run_probes(AdvisorConfig(), HistoryStore(tmp_path / "a.db"), resource="hpc", once=True)
