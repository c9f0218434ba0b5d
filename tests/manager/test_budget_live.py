"""The budget on the embedded site, as an administrator meets it: `elasticsite run` and
`elasticsite status` as subprocesses, the manager's log, and what survives a restart."""

from __future__ import annotations

import itertools
import json
import logging
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.cli import run_command, site_file, start_run

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.local import LocalCloud
from elasticsite.core import WorkerRecord
from elasticsite.history.samples import HistoryReader
from elasticsite.manager.spending import Spending, spending_view
from elasticsite.manager.store import StateStore
from elasticsite.model import Cause, CloudSpec, Decision, Launch, Refusal, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Bill, Budget, cost_between, period_bounds

from .conftest import wait_for

PRICE = 36.0
"""Per hour, billed by the second: a cent a second."""
SITE = """\
[site]
currency = "EUR"

[manager]
site_id = "budgeted"
state_dir = "{state}"
interval = 0.2
retry_backoff = 0.2
history_interval = 0.2
on_shutdown = "drain"
shutdown_timeout = 30.0

[policy]
name = "on_demand"
budget = {{ amount = {amount}, period = "day" }}

[[clouds]]
name = "lab"
max_instances = 4
price_per_hour = {price}
billing_increment = 1
boot_time = 0.3
shutdown_time = 0.1
options = {{ boot_jitter = 0.1, poll_interval = 0.1, seed = 3 }}
"""


def status(cfg: Path) -> str:
    out = run_command(
        "status", "-c", str(cfg), "--events", "0", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def site(tmp_path: Path, amount: float) -> tuple[Path, Path]:
    return site_file(tmp_path, SITE, amount=f"{amount:.2f}", price=PRICE)


def start(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    """``elasticsite run``, logging one JSON object a line to ``log``."""
    return start_run(cfg, log, "--log-format", "json")


def logged(log: Path) -> list[tuple[str, str]]:
    """The manager's log lines: (level, message)."""
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            out.append((record["level"], record["message"]))
    return out


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-3000:]


def test_a_launch_refused_by_the_budget_is_told_in_status_and_the_log(tmp_path: Path) -> None:
    # Enough for one worker running to the end of the day, not for two.
    now = time.time()
    left = period_bounds(now, "day")[1] - now
    cfg, state = site(tmp_path, 1.5 * left * PRICE / 3600)
    log = tmp_path / "manager.log"
    run_command("submit", "-c", str(cfg), "--count", "3", "--", "sleep", "2", check=True)
    cloud = LocalCloud("lab", state, "budgeted", state / "batch.db")
    try:
        proc = start(cfg, log)
        seen: list[str] = []

        def refusing() -> bool:
            seen.append(status(cfg))
            return "budget: refusing since" in seen[-1]

        wait_for(refusing, 60, "a refusal in status")
        shown = seen[-1]
        lines = {line.split(":")[0]: line for line in shown.splitlines() if ":" in line}
        assert re.fullmatch(r"spending: \d+\.\d\d EUR per hour now", lines["spending"])
        assert re.fullmatch(r"spent: \d+\.\d\d EUR so far \(lab \d+\.\d\d EUR\)", lines["spent"])
        day = time.strftime("%Y-%m-%d", time.gmtime(now))
        refusing = next(line for line in shown.splitlines() if "refusing since" in line)
        assert re.fullmatch(
            rf"budget: refusing since {day} \d\d:\d\d UTC: "
            r"(\d) launch(es)? held back \(\1 on lab\): the forecast spend to "
            r"\d{4}-\d\d-\d\d 00:00 UTC, [\d,]+\.\d\d EUR, would pass "
            r"the budget of [\d,]+\.\d\d EUR",
            refusing,
        ), refusing
        assert re.search(
            rf"budget: [\d,]+\.\d\d EUR per day, {day} 00:00 UTC to \S+ 00:00 UTC: "
            r"\d+\.\d\d EUR spent \(\d+%\), forecast [\d,]+\.\d\d EUR by the period's end",
            shown,
        ), shown
        # One worker serves the three jobs in turn; when the queue is empty nothing is
        # held back any more, and status says when the budget last refused.
        wait_for(lambda: "budget: last refused at" in status(cfg), 90, "the refusals to end")
        stop(proc, log)
        said = [(level, m) for level, m in logged(log) if m.startswith("budget:")]
        told = "budget: " + refusing.split(": ", 2)[2]  # as status tells it
        assert ("warning", told) in said or ("info", told) in said, said
        # The first refusal is a warning; what changes is told once, not at every step.
        level, first = said[0]
        assert level == "warning" and first.startswith("budget: 2 launches held back (2 on lab)")
        assert all(a != b for a, b in itertools.pairwise(said)), said
        assert any(m.startswith("budget: no launch held back any more") for _, m in said)
        store = StateStore(state / "manager.db")
        assert len(store.load(include_done=True)) == 1  # the one launch allowed
        assert sum(store.bill_totals().values()) > 0
    finally:
        cloud.kill_all()


def test_the_80_percent_warning_is_given_once_per_period_across_restarts(tmp_path: Path) -> None:
    # A worker that finished earlier today cost 85% of the budget.
    now = time.time()
    lo, hi = period_bounds(now, "day")
    start_at, end_at = max(lo, now - 1000), now - 1
    cost = cost_between(start_at, end_at, lo, hi, PRICE, 1.0)
    cfg, state = site(tmp_path, cost / 0.85)
    store = StateStore(state / "manager.db")
    store.add_bills([Bill("lab-00000", "lab", start_at, end_at, PRICE, 1.0)])
    log = tmp_path / "manager.log"

    history = HistoryReader(state / "manager.db")

    def samples() -> int:
        return len(history.samples(0.0))

    cloud = LocalCloud("lab", state, "budgeted", state / "batch.db")
    try:
        for _ in range(2):  # a restart remembers the warning it gave
            proc = start(cfg, log)
            wait_for(lambda: any("85% of" in m for _, m in logged(log)), 60, "the warning")
            seen = samples()
            wait_for(lambda: samples() >= seen + 10, 60, "ten more steps")  # noqa: B023
            stop(proc, log)
        warnings = [(level, m) for level, m in logged(log) if "% of " in m]
        assert len(warnings) == 1, warnings
        level, message = warnings[0]
        assert level == "warning"
        assert re.fullmatch(
            r"budget: 85% of [\d,]+\.\d\d EUR per day spent: [\d,]+\.\d\d EUR since "
            r"\S+ 00:00 UTC \(the period ends \S+ 00:00 UTC\)",
            message,
        ), message
    finally:
        cloud.kill_all()


# -- the watch itself, on a store ------------------------------------------------------

LAB = CloudSpec("lab", price_per_hour=1.0, billing_increment=3600)
DAY = 86400.0


def snapshot(now: float) -> SiteSnapshot:
    return SiteSnapshot(now, [], [], [], [LAB])


def test_the_warning_comes_again_in_the_next_period_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path / "manager.db")
    t = 100 * DAY + 3600
    store.add_bills([Bill("lab-00001", "lab", t - 10, t - 5, 9.0, 3600)])  # 9 of 10
    spending = Spending(store, [LAB], Budget(10.0, "day"), "GBP", t)
    with caplog.at_level(logging.INFO, logger="elasticsite.manager.budget"):
        for step in range(3):
            now = t + step
            spending.review(now, spending.later(now, []), snapshot(now), Decision())
        again = Spending(store, [LAB], Budget(10.0, "day"), "GBP", t + 10)
        again.review(t + 10, again.later(t + 10, []), snapshot(t + 10), Decision())
        tomorrow = t + DAY
        store.add_bills([Bill("lab-00002", "lab", tomorrow, tomorrow + 5, 8.0, 3600)])
        now = tomorrow + 10
        later = Spending(store, [LAB], Budget(10.0, "day"), "GBP", now)
        later.review(now, later.later(now, []), snapshot(now), Decision())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "budget: 90% of 10.00 GBP per day spent: 9.00 GBP since 1970-04-11 00:00 UTC "
        "(the period ends 1970-04-12 00:00 UTC)",
        "budget: 80% of 10.00 GBP per day spent: 8.00 GBP since 1970-04-12 00:00 UTC "
        "(the period ends 1970-04-13 00:00 UTC)",
    ]


def test_refusals_are_told_when_they_start_change_and_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path / "manager.db")
    t = 100 * DAY + 3600
    spending = Spending(store, [LAB], Budget(10.0, "day"), "GBP", t)

    def refused(n: int) -> Decision:
        launch = Launch("lab", "small", n, Cause.DEMAND)
        return Decision(refused=[Refusal(launch, "budget", 23.0 * n, 10.0, 101 * DAY)])

    with caplog.at_level(logging.INFO, logger="elasticsite.manager.budget"):
        for step, decision in enumerate([refused(1), refused(1), refused(2), Decision()]):
            now = t + step
            spending.review(now, spending.later(now, []), snapshot(now), decision)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", "budget: 1 launch held back (1 on lab): the forecast spend to "
                    "1970-04-12 00:00 UTC, 23.00 GBP, would pass the budget of 10.00 GBP"),
        ("INFO", "budget: 2 launches held back (2 on lab): the forecast spend to "
                 "1970-04-12 00:00 UTC, 46.00 GBP, would pass the budget of 10.00 GBP"),
        ("INFO", "budget: no launch held back any more (forecast 0.00 GBP of 10.00 GBP to "
                 "1970-04-12 00:00 UTC)"),
    ]  # fmt: skip
    watch = spending_view(store, [LAB], Budget(10.0, "day"), "GBP", t + 5).watch
    assert watch.refused is not None and not watch.refused.active
    assert (watch.refused.since, watch.refused.last) == (t, t + 2)


def test_workers_finished_before_bills_were_kept_are_billed_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path / "manager.db")
    old = Worker("lab-00001", "lab", "small", 1, requested_at=1000.0)
    old.state, old.state_since = WorkerState.TERMINATED, 1000.0 + 5400  # two started hours
    store.save(WorkerRecord(old, instance_gone=True))
    view = spending_view(store, [LAB], None, "USD", 9000.0)
    assert view.spent.by_cloud == {"lab": 2.0}  # counted, not written
    assert store.bill_totals() == {}
    with caplog.at_level(logging.INFO, logger="elasticsite.manager.budget"):
        Spending(store, [LAB], None, "USD", 9000.0)
        Spending(store, [LAB], None, "USD", 9000.0)
    assert store.bill_totals() == {"lab": 2.0}
    assert [r.getMessage() for r in caplog.records] == [
        "billed 1 finished workers kept from before at the configured prices"
    ]


def test_a_store_from_before_bills_is_billed_once_when_the_manager_first_opens_it(
    tmp_path: Path,
) -> None:
    cfg, state = site(tmp_path, 1e6)
    store = StateStore(state / "manager.db")
    old = Worker("lab-00001", "lab", "small", 1, requested_at=time.time() - 400)
    old.state, old.state_since = WorkerState.TERMINATED, old.requested_at + 100  # 1.00 EUR
    store.save(WorkerRecord(old, instance_gone=True))
    LocalBatch(state / "batch.db").close()  # the older site's queue, beside its store
    assert "spent: 1.00 EUR so far (lab 1.00 EUR)" in status(cfg)  # counted, not written
    log = tmp_path / "manager.log"
    cloud = LocalCloud("lab", state, "budgeted", state / "batch.db")
    try:
        for run in (1, 2):
            proc = start(cfg, log)
            wait_for(lambda: store.bill_totals() == {"lab": 1.0}, 60, "the bill")
            wait_for(lambda: sum("site 'budgeted'" in m for _, m in logged(log)) == run,  # noqa: B023
                     60, "the manager running")  # fmt: skip
            stop(proc, log)
    finally:
        cloud.kill_all()
    said = [m for _, m in logged(log) if m.startswith("billed ")]
    assert said == ["billed 1 finished workers kept from before at the configured prices"]
    assert "spent: 1.00 EUR so far (lab 1.00 EUR)" in status(cfg)
