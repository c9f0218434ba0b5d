"""The agent's parts: planning, script running, state, backoff; and the agent itself
against a real broker (uvicorn over TLS on 127.0.0.1), run in this process."""

from __future__ import annotations

import json
import logging
import random
import stat
import time
from pathlib import Path
from typing import Literal

import pytest

from elasticsite.context.agent import (
    Agent,
    AgentError,
    AgentSettings,
    AgentState,
    Backoff,
    ContextRef,
    Identity,
    ScriptRunner,
    Step,
    configure,
    discover_identity,
    load_userdata,
    plan,
)
from elasticsite.context.client import NodeClient
from elasticsite.context.models import ContextCreated, Entry, NodeInfo, Updates

from .conftest import LiveBroker, node_info, run_agent_once, ssh_key, write_userdata

W1_KEY = ssh_key("w1", "root@w1")
ED_KEY = ssh_key("ed", "ed")
OTHER_KEY = ssh_key("other", "other")

RECORDER = """\
#!/bin/sh
# Appends one line per run: which script, its arguments and the contract's variables.
printf '%s|%s|%s|%s|%s|%s|%s\\n' "{name}" "$*" "${{ELASTICSITE_NODE_ID-}}" \\
    "${{ELASTICSITE_ENTRY_ID-}}" "${{ELASTICSITE_NODE_HOSTNAME-}}" \\
    "$ELASTICSITE_SELF_HOSTNAME" "$ELASTICSITE_AGENT_ROOT" >>"$RECORD_LOG"
{extra}
"""


def write_script(path: Path, body: str, mode: int = 0o755) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(mode)


def recording_scripts(root: Path, extra: dict[str, str] | None = None) -> Path:
    """A scripts tree whose every script records its run to $RECORD_LOG."""
    scripts = root / "scripts"
    for name in ("init/10-a", "add/10-a", "add/20-b", "delete/10-a", "restart/10-a"):
        write_script(scripts / name, RECORDER.format(name=name, extra=(extra or {}).get(name, "")))
    # Never run: not executable, a backup, hidden.
    write_script(scripts / "add/30-off", RECORDER.format(name="add/30-off", extra=""), 0o644)
    write_script(scripts / "add/40-old~", RECORDER.format(name="add/40-old~", extra=""))
    write_script(scripts / "add/.50-hidden", RECORDER.format(name="add/.50", extra=""))
    return scripts


def records(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split("|") for line in log.read_text().splitlines()]


def runs(log: Path) -> list[str]:
    """Each run as 'script short-hostname' (just 'script' for init/restart)."""
    out = []
    for name, args, *_ in records(log):
        out.append(f"{name} {args.split(' ')[0]}" if args else name)
    return out


def info(name: str, n: int, node_id: str | None = None) -> NodeInfo:
    return NodeInfo(node_id=node_id or f"id-{name}", joined_at=float(n), **node_info(name, n))


def entries(
    *changes: tuple[int, Literal["join", "leave"], NodeInfo], snapshot: bool = False
) -> Updates:
    """The broker's answer holding ``changes`` (id, op, node), the last id the last's."""
    listed = [Entry(id=i, op=op, node=node) for i, op, node in changes]
    return Updates(last_id=changes[-1][0], snapshot=snapshot, entries=listed)


# --- planning ------------------------------------------------------------------------


def test_incremental_entries_plan_one_step_each_in_order() -> None:
    a, b = info("a", 1), info("b", 2)
    updates = entries((1, "join", a), (2, "join", b), (3, "leave", a))
    assert [(s.op, s.node.short_hostname, s.entry_id) for s in plan({}, updates)] == [
        ("add", "a", 1),
        ("add", "b", 2),
        ("delete", "a", 3),
    ]


def test_leave_of_unknown_node_runs_nothing_and_changed_record_is_replaced() -> None:
    old = info("a", 1)
    new = NodeInfo(**{**old.model_dump(), "address": "10.9.9.9"})
    updates = entries((4, "leave", info("ghost", 7)), (5, "join", new))
    steps = plan({old.node_id: old}, updates)
    assert [(s.op, s.node.address) for s in steps] == [("delete", "10.0.0.1"), ("add", "10.9.9.9")]


def test_snapshot_is_applied_as_a_diff_against_known_members() -> None:
    a, b, c, d = info("a", 1), info("b", 2), info("c", 3), info("d", 4)
    c2 = NodeInfo(**{**c.model_dump(), "data": "changed"})
    known = {n.node_id: n for n in (a, b, c)}
    snap = entries((2, "join", b), (30, "join", c2), (40, "join", d), snapshot=True)
    steps = plan(known, snap)
    assert [(s.op, s.node.short_hostname, s.node.data) for s in steps] == [
        ("delete", "a", "slots=1"),
        ("delete", "c", "slots=3"),
        ("add", "c", "changed"),
        ("add", "d", "slots=4"),
    ]
    # Nothing changed: nothing runs.
    assert plan({n.node_id: n for n in (b, c2, d)}, snap) == []


# --- scripts -------------------------------------------------------------------------


def test_scripts_run_in_name_order_with_arguments_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("RECORD_LOG", str(log))
    scripts = recording_scripts(tmp_path)
    runner = ScriptRunner(
        scripts, context_uri="https://b/ctx/1", root=tmp_path / "root", self_hostname="me.x"
    )
    node = NodeInfo(
        node_id="n1",
        short_hostname="w1",
        hostname="w1.x",
        address="10.0.0.1",
        ssh_host_key=W1_KEY,
        data="two words",
        joined_at=1.0,
    )
    assert runner.run("add", Step("add", node, 7)) == 0
    assert runner.run("restart") == 0
    assert records(log) == [
        ["add/10-a", f"w1 w1.x 10.0.0.1 {W1_KEY} two words", "n1", "7", "w1.x",
         "me.x", str(tmp_path / "root")],
        ["add/20-b", f"w1 w1.x 10.0.0.1 {W1_KEY} two words", "n1", "7", "w1.x",
         "me.x", str(tmp_path / "root")],
        ["restart/10-a", "", "", "", "", "me.x", str(tmp_path / "root")],
    ]  # fmt: skip


def test_arguments_arrive_as_exactly_five_words(tmp_path: Path) -> None:
    out = tmp_path / "args"
    write_script(
        tmp_path / "s/add/x",
        f'#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done >{out}\n',
    )
    runner = ScriptRunner(tmp_path / "s", context_uri="u", root=tmp_path, self_hostname="h")
    node = info("w1", 1)
    runner.run("add", Step("add", node, 1))
    assert out.read_text().splitlines() == [
        "[w1]",
        "[w1.cluster.example.org]",
        "[10.0.0.1]",
        f"[{node.ssh_host_key}]",
        "[slots=1]",
    ]


def test_failing_script_is_logged_and_the_next_one_still_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("RECORD_LOG", str(log))
    scripts = recording_scripts(tmp_path, {"add/10-a": "echo disk full >&2; exit 3"})
    runner = ScriptRunner(scripts, context_uri="u", root=tmp_path, self_hostname="h")
    with caplog.at_level(logging.WARNING):
        assert runner.run("add", Step("add", info("w1", 1), 1)) == 1
    assert runs(log) == ["add/10-a w1", "add/20-b w1"]
    assert "add/10-a w1.cluster.example.org exited 3; output: disk full" in caplog.text

    strict = ScriptRunner(scripts, context_uri="u", root=tmp_path, self_hostname="h", strict=True)
    with pytest.raises(AgentError, match=r"script add/10-a .* exited 3 \(--strict\)"):
        strict.run("add", Step("add", info("w1", 1), 1))


def test_script_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    write_script(tmp_path / "s/restart/slow", f"#!/bin/sh\nsleep 60 &\necho $! >{pidfile}\nwait\n")
    runner = ScriptRunner(tmp_path / "s", context_uri="u", root=tmp_path, self_hostname="h")
    runner.timeout = 0.5
    assert runner.run("restart") == 1
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# --- state, user data, identity, backoff ---------------------------------------------


def test_state_round_trips_atomically_and_privately(tmp_path: Path) -> None:
    path = tmp_path / "d" / "agent.json"
    state = AgentState("https://b/ctx/1", node_id="n", node_secret="s3cret", init_done=True)
    state.last_id = 12
    state.members = {"id-a": info("a", 1)}
    state.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["agent.json"]  # no temp left
    again = AgentState.load(path, "https://b/ctx/1")
    assert (again.node, again.last_id, again.init_done) == (("n", "s3cret"), 12, True)
    assert again.members == state.members
    with pytest.raises(
        AgentError, match=r"belongs to context https://b/ctx/1, not https://b/ctx/2"
    ):
        AgentState.load(path, "https://b/ctx/2")
    path.write_text("{oops")
    with pytest.raises(AgentError, match=r"agent state .* is unreadable"):
        AgentState.load(path, "https://b/ctx/1")


def test_journal_replays_over_the_saved_state_and_ignores_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    state = AgentState("u", init_done=True, last_id=2, members={"id-a": info("a", 1)})
    state.save(path)
    state.record(path, {"add": info("b", 2).model_dump(), "last_id": 3, "restart_pending": True})
    state.record(path, {"delete": "id-a", "last_id": 4})
    journal = AgentState.journal_path(path)
    assert len(journal.read_text().splitlines()) == 2
    with journal.open("a") as f:
        f.write('{"delete": "id-b", "last_id": 5')  # torn by a crash: never happened
    again = AgentState.load(path, "u")
    assert (again.last_id, sorted(again.members), again.restart_pending) == (4, ["id-b"], True)
    again.save(path)  # the whole state supersedes the journal
    assert not journal.exists()
    assert AgentState.load(path, "u").members.keys() == {"id-b"}
    # Replaying changes the saved file already holds changes nothing.
    again.record(path, {"add": info("c", 3).model_dump(), "last_id": 6})
    again.save(path)
    journal.write_text(json.dumps({"add": info("c", 3).model_dump(), "last_id": 6}) + "\n")
    replayed = AgentState.load(path, "u")
    assert (replayed.last_id, sorted(replayed.members)) == (6, ["id-b", "id-c"])


def test_user_data_errors_name_the_file_and_the_keys(tmp_path: Path) -> None:
    ud = tmp_path / "ud.json"
    ud.write_text(json.dumps({"context_uri": "https://b/ctx/1", "context_key": "k"}))
    with pytest.raises(AgentError, match=rf"user data {ud} lacks context_secret"):
        load_userdata(ud)
    ud.write_text("[1]")
    with pytest.raises(AgentError, match="must be a JSON object"):
        load_userdata(ud)
    with pytest.raises(AgentError, match=r"cannot read user data .*missing"):
        load_userdata(tmp_path / "missing")
    ud.write_text(json.dumps({"context_uri": "u", "context_key": "k", "context_secret": "s"}))
    ref = load_userdata(ud)
    assert (ref.uri, ref.key, ref.secret, ref.ca_pem) == ("u", "k", "s", None)
    assert "s" not in repr(ref).replace("ContextRef", "").replace("key", "")


def test_identity_reads_the_host_key_under_the_root_and_takes_overrides(tmp_path: Path) -> None:
    ref = ContextRef("https://127.0.0.1:9/ctx/1", "k", "s")
    with pytest.raises(AgentError, match=r"no SSH host key in .*; pass --ssh-host-key"):
        discover_identity(ref, tmp_path)
    (tmp_path / "etc/ssh").mkdir(parents=True)
    (tmp_path / "etc/ssh/ssh_host_rsa_key.pub").write_text("ssh-rsa BBBB rsa\n")
    (tmp_path / "etc/ssh/ssh_host_ed25519_key.pub").write_text(ED_KEY + "\n")
    me = discover_identity(ref, tmp_path, short_hostname="w7", hostname="w7.x", data="d")
    assert me == Identity("w7", "w7.x", "127.0.0.1", ED_KEY, "d")
    pub = tmp_path / "other.pub"
    pub.write_text(OTHER_KEY + "\n")
    assert discover_identity(ref, tmp_path, ssh_host_key=str(pub)).ssh_host_key == OTHER_KEY


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(base=0.5, cap=8.0, rng=random.Random(1))
    delays = [backoff.next() for _ in range(8)]
    ceilings = [0.5, 1, 2, 4, 8, 8, 8, 8]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert backoff.next() <= 0.5


# --- the agent against a real broker -------------------------------------------------


def make_settings(
    broker: LiveBroker,
    ctx: ContextCreated,
    tmp_path: Path,
    name: str,
    n: int,
    *,
    once: bool = True,
    strict: bool = False,
) -> AgentSettings:
    ud = write_userdata(tmp_path / f"{name}.userdata.json", broker, ctx)
    body = node_info(name, n)
    return configure(
        userdata=ud,
        root=tmp_path / f"root-{name}",
        scripts=tmp_path / "scripts",
        short_hostname=body["short_hostname"],
        hostname=body["hostname"],
        address=body["address"],
        ssh_host_key=body["ssh_host_key"],
        once=once,
        strict=strict,
    )


@pytest.fixture
def ctx(live_broker: LiveBroker) -> ContextCreated:
    with live_broker.admin() as admin:
        return admin.create("agents")


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.log"
    monkeypatch.setenv("RECORD_LOG", str(path))
    recording_scripts(tmp_path)
    return path


def test_agent_joins_applies_in_order_and_never_repeats(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    others = {name: live_broker.node(ctx) for name in ("w2", "w3")}
    others["w2"].join(node_info("w2", 2))
    settings = make_settings(live_broker, ctx, tmp_path, "w1", 1, once=True)

    run_agent_once(settings)
    assert runs(log) == [
        "init/10-a",
        "add/10-a w2", "add/20-b w2",
        "add/10-a w1", "add/20-b w1",
        "restart/10-a",
    ]  # fmt: skip
    others["w3"].join(node_info("w3", 3))
    others["w2"].leave()
    log.unlink()
    agent = run_agent_once(settings)
    assert runs(log) == ["add/10-a w3", "add/20-b w3", "delete/10-a w2", "restart/10-a"]
    # Entry ids as the broker numbered them: w2 joined 1, w1 2, w3 3, w2 left 4.
    assert [r[3] for r in records(log)[:3]] == ["3", "3", "4"]
    assert agent.state.last_id == 4
    assert sorted(m.short_hostname for m in agent.state.members.values()) == ["w1", "w3"]
    log.unlink()
    run_agent_once(settings)
    assert runs(log) == []  # nothing new: nothing runs, not even restart


def test_crash_in_the_middle_of_a_batch_reruns_only_the_entry_being_applied(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    # Stand-in for a crash: a strict agent stops dead when w3's second add script fails,
    # after w2's entry was saved and before w3's was.
    flag = tmp_path / "fail"
    recording_scripts(tmp_path, {"add/20-b": f'[ "$1" != w3 ] || [ ! -e {flag} ] || exit 1'})
    settings = make_settings(live_broker, ctx, tmp_path, "w1", 1, once=True)
    run_agent_once(settings)
    for n, name in enumerate(("w2", "w3", "w4"), start=2):
        live_broker.node(ctx).join(node_info(name, n))
    flag.touch()
    log.unlink()
    strict = make_settings(live_broker, ctx, tmp_path, "w1", 1, once=True, strict=True)
    with pytest.raises(AgentError, match="add/20-b"):
        run_agent_once(strict)
    assert runs(log) == ["add/10-a w2", "add/20-b w2", "add/10-a w3", "add/20-b w3"]
    flag.unlink()
    log.unlink()
    run_agent_once(settings)
    # First the restart scripts the interrupted batch never ran (w2 was applied), then
    # w3's entry again (its scripts must be idempotent), w4 once, and restart; w2 not again.
    assert runs(log) == [
        "restart/10-a",
        "add/10-a w3", "add/20-b w3",
        "add/10-a w4", "add/20-b w4",
        "restart/10-a",
    ]  # fmt: skip


def test_journal_is_folded_into_the_state_file_as_it_grows(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    for n, name in enumerate(("w2", "w3", "w4", "w5"), start=2):
        live_broker.node(ctx).join(node_info(name, n))
    settings = make_settings(live_broker, ctx, tmp_path, "w1", 1)
    journal = AgentState.journal_path(settings.state)
    c = settings.context
    with NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem) as link:
        agent = Agent(settings, link)
        agent.journal_slack = 0
        assert agent.run() == 0
    # 5 members: at most 5 lines pending, the rest folded into the state file.
    assert 0 < len(journal.read_text().splitlines()) <= 5
    saved = json.loads(settings.state.read_text())
    assert len(saved["members"]) >= 1
    assert AgentState.load(settings.state, ctx.uri).members == agent.state.members
    assert len(agent.state.members) == 5


def test_removed_node_joins_again_and_confused_agent_resynchronises(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    settings = make_settings(live_broker, ctx, tmp_path, "w1", 1, once=True)
    first = run_agent_once(settings).state.node_id
    with live_broker.admin() as admin:
        admin.remove_host(ctx.id, "w1")
    log.unlink()
    agent = run_agent_once(settings)  # its credential is now refused (401): it joins again
    assert agent.state.node_id not in (None, first)
    assert runs(log) == ["delete/10-a w1", "add/10-a w1", "add/20-b w1", "restart/10-a"]

    # A state claiming entries the broker never wrote, and a member it never had (409).
    state = AgentState.load(settings.state, ctx.uri)
    state.last_id = 999
    one = next(iter(state.members.values()))
    ghost = NodeInfo(
        **{**one.model_dump(), "node_id": "ghost", "short_hostname": "gh", "hostname": "gh.x"}
    )
    state.members["ghost"] = ghost
    state.save(settings.state)
    log.unlink()
    agent = run_agent_once(settings)
    assert runs(log) == ["delete/10-a gh", "restart/10-a"]
    assert agent.state.last_id == 3


def test_unreachable_broker_is_retried_with_growing_delays(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    settings = make_settings(live_broker, ctx, tmp_path, "w1", 1, once=True)
    live_broker.stop()
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 4:
            live_broker.start()

    c = settings.context
    with NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem) as link:
        agent = Agent(settings, link, sleep=sleep, backoff=Backoff(base=1, cap=4))
        assert agent.run() == 0
    assert len(delays) == 4
    assert all([0.5 <= delays[0] <= 1, 1 <= delays[1] <= 2, 2 <= delays[2] <= 4])
    assert runs(log)[-1] == "restart/10-a"
    assert agent.state.node is not None and agent.state.last_id == 1


def test_wrong_context_secret_is_one_clear_error(
    live_broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, log: Path
) -> None:
    bad = ContextCreated(**{**ctx.model_dump(), "secret": "not-the-secret"})
    settings = make_settings(live_broker, bad, tmp_path, "w1", 1, once=True)
    with pytest.raises(AgentError, match=r"refused the context key/secret for https://"):
        run_agent_once(settings)
    assert "not-the-secret" not in settings.state.read_text()


def test_configure_explains_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ELASTICSITE_USERDATA", raising=False)
    with pytest.raises(AgentError, match="no context given: pass --userdata FILE"):
        configure(root=tmp_path)
    with pytest.raises(AgentError, match=r"scripts directory .* does not exist"):
        configure(uri="https://b/ctx/1", key="k", secret="s", scripts=tmp_path / "none")
