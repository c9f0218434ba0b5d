"""Real ``elasticsite agent`` processes, each with its own root and identity, against a
real broker (uvicorn over TLS on 127.0.0.1): they converge, survive a broker restart,
and a killed agent neither repeats nor skips an entry when started again."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.cli import run_command

from elasticsite.context.agent import DEFAULT_SCRIPTS
from elasticsite.context.models import ContextCreated

from .conftest import LiveBroker, node_info, ssh_key, write_userdata

pytestmark = pytest.mark.slow

RECORD = """\
#!/bin/sh
# Records every run: which directory, the node's short name, the entry id.
echo "{kind} ${{1-}} ${{ELASTICSITE_ENTRY_ID-}}" >>"$ELASTICSITE_AGENT_ROOT/record.log"
"""


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class AgentProc:
    """One node: a root directory with its SSH host key, and its agent process."""

    def __init__(
        self, tmp: Path, name: str, n: int, ctx: ContextCreated, broker: LiveBroker, *extra: str
    ) -> None:
        self.name = name
        self.root = tmp / name
        self.info = node_info(name, n)
        (self.root / "etc/ssh").mkdir(parents=True)
        (self.root / "etc/ssh/ssh_host_ed25519_key.pub").write_text(self.info["ssh_host_key"])
        userdata = write_userdata(self.root / "userdata.json", broker, ctx)
        self.argv = [
            sys.executable, "-m", "elasticsite", "agent",
            "--userdata", str(userdata), "--root", str(self.root),
            "--scripts", str(tmp / "scripts"),
            "--short-hostname", name, "--hostname", self.info["hostname"],
            "--address", self.info["address"], "--data", self.info["data"],
            *extra,
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.root / "agent.err").open("ab") as err:
            self.proc = subprocess.Popen(self.argv, stderr=err, stdout=subprocess.DEVNULL)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=20)
        self.proc = None
        return code

    def log(self) -> list[str]:
        path = self.root / "record.log"
        return path.read_text().splitlines() if path.exists() else []

    def hosts(self) -> list[str]:
        path = self.root / "etc/hosts"
        text = path.read_text() if path.exists() else ""
        return sorted(line.split()[2] for line in text.splitlines() if line[:1].isdigit())

    def known(self) -> list[str]:
        path = self.root / "etc/ssh/ssh_known_hosts"
        text = path.read_text() if path.exists() else ""
        return sorted(line.split(",")[1] for line in text.splitlines() if line[:1] != "#")

    def stderr(self) -> str:
        return (self.root / "agent.err").read_text(errors="replace")


@pytest.fixture
def ctx(live_broker: LiveBroker) -> ContextCreated:
    with live_broker.admin() as admin:
        return admin.create("e2e")


@pytest.fixture
def agents(tmp_path: Path, ctx: ContextCreated, live_broker: LiveBroker) -> Iterator[
    Callable[..., AgentProc]
]:  # fmt: skip
    """Shipped scripts plus a recorder in each directory; a factory of agents."""
    scripts = tmp_path / "scripts"
    shutil.copytree(DEFAULT_SCRIPTS, scripts)
    for kind in ("init", "add", "delete", "restart"):
        (scripts / kind).mkdir(exist_ok=True)
        path = scripts / kind / "90-record"
        path.write_text(RECORD.format(kind=kind))
        path.chmod(0o755)
    made: list[AgentProc] = []

    def make(name: str, n: int, *extra: str) -> AgentProc:
        agent = AgentProc(tmp_path, name, n, ctx, live_broker, *extra)
        made.append(agent)
        agent.start()
        return agent

    yield make
    for agent in made:
        if agent.proc is not None:
            agent.proc.kill()
            agent.proc.wait()


def entries(log: list[str]) -> list[tuple[str, str, int]]:
    """(kind, node, entry id) of each add/delete run, in order."""
    out = []
    for line in log:
        kind, *rest = line.split()
        if kind in ("add", "delete"):
            out.append((kind, rest[0], int(rest[1])))
    return out


def test_agents_converge_and_a_departure_reaches_everyone(
    agents: Callable[..., AgentProc],
) -> None:
    w1 = agents("w1", 1, "--wait", "5")
    w2 = agents("w2", 2, "--wait", "5")
    w3 = agents("w3", 3, "--period", "0.5")  # periodic polling, as in paper 001
    everyone = [w1, w2, w3]
    for a in everyone:
        wait_for(f"{a.name} to know all three", lambda a=a: len(entries(a.log())) == 3)
        wait_for(f"{a.name}'s restart scripts", lambda a=a: a.log()[-1] == "restart  ")
        assert a.hosts() == ["w1", "w2", "w3"] and a.known() == ["w1", "w2", "w3"]
    assert w2.stop(signal.SIGTERM) == 0  # leaves the context on its way out
    for a in (w1, w3):
        wait_for(f"{a.name} to forget w2", lambda a=a: a.log()[-2:] == ["delete w2 4", "restart  "])
        assert a.hosts() == ["w1", "w3"] and a.known() == ["w1", "w3"]
    assert "left https://" in w2.stderr()
    for a in everyone:
        log = a.log()
        assert log[-1] == "restart  "  # every batch ends with the restart scripts
        assert log[0] == "init  " and log.count("init  ") == 1
        runs = entries(log)
        assert len(set(runs)) == len(runs), f"{a.name} repeated an entry: {log}"
    # The entries after its first snapshot arrive in id order.
    tail = [e for e in entries(w1.log()) if e[2] > 1]
    assert tail == sorted(tail, key=lambda e: e[2])
    assert ("delete", "w2", 4) in entries(w1.log()) and ("delete", "w2", 4) in entries(w3.log())
    for a in (w1, w3):
        assert a.stop(signal.SIGINT) == 0
    assert "Traceback" not in w1.stderr() + w2.stderr() + w3.stderr()


def test_broker_restart_while_agents_wait_loses_nothing(
    agents: Callable[..., AgentProc], live_broker: LiveBroker, ctx: ContextCreated
) -> None:
    w1 = agents("w1", 1, "--wait", "30")
    w2 = agents("w2", 2, "--wait", "30")
    for a in (w1, w2):
        wait_for(f"{a.name} to know both", lambda a=a: a.hosts() == ["w1", "w2"])
    time.sleep(0.5)  # both are now inside a long poll
    live_broker.stop(force=True)
    time.sleep(1.5)  # they notice and retry
    live_broker.start()
    live_broker.node(ctx).join(node_info("w9", 9))
    for a in (w1, w2):
        wait_for(
            f"{a.name} to learn of w9", lambda a=a: a.log()[-2:] == ["add w9 3", "restart  "], 40
        )
        assert a.hosts() == ["w1", "w2", "w9"]
        runs = entries(a.log())
        assert runs.count(("add", "w9", 3)) == 1
        assert len(set(runs)) == len(runs)
    assert "broker unavailable" in w1.stderr()


def test_killed_agent_neither_repeats_nor_skips_after_restart(
    agents: Callable[..., AgentProc], live_broker: LiveBroker, ctx: ContextCreated
) -> None:
    w1 = agents("w1", 1, "--wait", "5")
    wait_for("w1 to join", lambda: w1.hosts() == ["w1"])
    nodes = {name: live_broker.node(ctx) for name in ("w2", "w3", "w4")}
    nodes["w2"].join(node_info("w2", 2))
    nodes["w3"].join(node_info("w3", 3))
    # Killed between batches (a kill inside one re-runs that one entry, by design).
    wait_for("w1 to apply w2 and w3", lambda: w1.log()[-2:] == ["add w3 3", "restart  "])
    assert w1.stop(signal.SIGKILL) == -signal.SIGKILL  # no leave, no clean-up
    nodes["w4"].join(node_info("w4", 4))
    nodes["w2"].leave()
    w1.start()
    wait_for("w1 to catch up", lambda: w1.log()[-2:] == ["delete w2 5", "restart  "])
    time.sleep(0.5)  # and nothing more comes
    assert w1.hosts() == ["w1", "w3", "w4"]
    assert entries(w1.log()) == [
        ("add", "w1", 1),
        ("add", "w2", 2),
        ("add", "w3", 3),
        ("add", "w4", 4),
        ("delete", "w2", 5),
    ]
    assert w1.log().count("init  ") == 1
    with live_broker.admin() as admin:  # still the same member: it did not join twice
        assert [m.short_hostname for m in admin.members(ctx.id).members] == ["w1", "w3", "w4"]
    assert w1.stop() == 0


def test_agent_command_says_what_is_wrong_in_one_line(
    tmp_path: Path, ctx: ContextCreated, live_broker: LiveBroker
) -> None:
    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"}
        return run_command("agent", "--root", str(tmp_path), *args, env=env, timeout=60)

    out = agent()
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error: no context given: pass --userdata FILE (or set ELASTICSITE_USERDATA), "
        "or --uri, --key and --secret"
    )
    userdata = tmp_path / "ud.json"
    userdata.write_text('{"context_uri": "x"}')
    out = agent("--userdata", str(userdata))
    assert out.returncode == 1
    assert out.stderr.strip() == (f"error: user data {userdata} lacks context_key, context_secret")
    out = agent(
        "--uri", ctx.uri, "--key", ctx.key, "--secret", "wrong", "--ca", str(live_broker.cert),
        "--address", "10.0.0.1", "--ssh-host-key", "ssh-ed25519 AAAA", "--once", "-q",
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error: this node's record cannot be published: "
        "ssh_host_key: not a valid ssh-ed25519 public key"
    )
    out = agent(
        "--uri", ctx.uri, "--key", ctx.key, "--secret", "wrong", "--ca", str(live_broker.cert),
        "--address", "10.0.0.1", "--ssh-host-key", ssh_key("w1"), "--once", "-q",
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"error: broker refused the context key/secret for {ctx.uri} "
        "(context deleted, or wrong user data)"
    )
