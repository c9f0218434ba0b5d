"""``elasticsite run|submit|queue|status|policies``: the configured site's manager,
its batch queue and its state, and the policies it can run (``cancel`` and ``job``
are in :mod:`elasticsite.cli.jobs`)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from elasticsite import __version__
from elasticsite.cli.cloud import last_errors
from elasticsite.cli.common import (
    ConfigOpt,
    LogFormatOpt,
    NonNegativeInt,
    PositiveInt,
    announce,
    config_path,
    console,
    fail,
    finite,
    open_configured_site,
    open_site_manager,
    say,
    state_errors,
)

if TYPE_CHECKING:
    from elasticsite.core import WorkerRecord
    from elasticsite.manager.spending import SpendingView

__all__ = ["left_running", "list_policies", "queue", "run", "status", "submit"]


@state_errors()
def run(
    config: ConfigOpt = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 1,
    log_format: LogFormatOpt = "human",
) -> None:
    """Run the manager loop until interrupted (SIGINT/SIGTERM stop it cleanly)."""
    site, manager = open_site_manager(config, verbose, log_format)

    signals = 0

    def stop(signum: int, _frame: Any) -> None:
        nonlocal signals
        signals += 1
        draining = site.config.manager.on_shutdown == "drain"
        if signals == 1:
            logging.getLogger("elasticsite").warning(
                "signal %d: stopping (%s)%s",
                signum,
                "draining and terminating workers" if draining else "leaving workers running",
                "; signal again to stop at once" if draining else "",
            )
        else:
            logging.getLogger("elasticsite").warning(
                "signal %d again: stopping now, leaving the remaining workers", signum
            )
        manager.stop()

    from elasticsite.manager.lock import SiteBusy, manager_lock

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    cfg = site.config
    listener = None
    try:
        with manager_lock(site.state_dir):
            if manager.metrics is not None:
                from elasticsite.manager.exporter import serve_metrics

                address, port = cfg.manager.metrics_address, cfg.manager.metrics_port
                try:
                    listener = serve_metrics(manager.metrics, address, port)
                except OSError as exc:
                    raise fail(
                        f"metrics: cannot listen on {address} port {port}: {exc.strerror}"
                    ) from None
                host = f"[{address}]" if ":" in address else address
                announce(f"metrics: http://{host}:{port}/metrics")
            announce(
                f"elasticsite {__version__}: site {cfg.manager.site_id!r}, policy "
                f"{cfg.policy.name}, clouds {', '.join(c.name for c in cfg.clouds)}, "
                f"state in {site.state_dir}"
            )
            manager.run()
    except SiteBusy as exc:
        raise fail(str(exc)) from None
    finally:
        if listener is not None:
            listener.shutdown()
    left = left_running(manager.records.values())
    if left:
        announce(
            f"left {left} running; the next `elasticsite run` adopts them, and "
            f"`elasticsite down -c {config_path(config)}` drains and terminates them",
            logging.WARNING,
        )


def left_running(records: Iterable[WorkerRecord]) -> str:
    """``3 workers (2 on private, 1 on public)`` for the workers still up, or ``""``."""
    per: dict[str, int] = {}
    for rec in records:
        if rec.worker.state.live:
            per[rec.worker.cloud] = per.get(rec.worker.cloud, 0) + 1
    total = sum(per.values())
    if not total:
        return ""
    where = ", ".join(f"{n} on {c}" for c, n in sorted(per.items()))
    return f"{total} worker{'s' if total != 1 else ''} ({where})"


@state_errors()
def submit(
    command: Annotated[list[str], typer.Argument(help="The job's command and arguments.")],
    config: ConfigOpt = None,
    cores: Annotated[PositiveInt, typer.Option()] = 1,
    walltime: Annotated[
        float, typer.Option(min=1, callback=finite, help="Requested time limit, s.")
    ] = 3600,
    count: Annotated[PositiveInt, typer.Option(help="Submit this many copies.")] = 1,
    attr: Annotated[
        list[str] | None,
        typer.Option(
            "--attr",
            metavar="KEY=VALUE",
            help="A job attribute, e.g. partition=cloud, qos=high, account=phys (repeatable).",
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            metavar="NAME",
            help="Whose job it is, run as them: another user's only as root, where the batch "
            "system allows it (default: yours).",
        ),
    ] = None,
) -> None:
    """Queue a job on the site's batch system: submit --cores 1 --walltime 60 -- sleep 30"""
    from rich.markup import escape

    from elasticsite.attributes import VM_TYPE, InvalidAttribute, parse_pairs
    from elasticsite.batch.base import BatchError, JobRequest
    from elasticsite.batch.identity import USER_NAME
    from elasticsite.files import StateFileError

    try:
        attributes = parse_pairs(attr or [])
    except InvalidAttribute as exc:
        raise fail(f"--attr: {exc}") from None
    if user is not None and not USER_NAME.fullmatch(user):
        raise fail(f"--user: {escape(repr(user))} is not a user name")
    site = open_configured_site(config)
    vm_type = attributes.get(VM_TYPE)
    offered = sorted({vm.name for c in site.config.cloud_specs() for vm in c.vm_types})
    if vm_type is not None and vm_type not in offered:
        raise fail(
            f"--attr {VM_TYPE}={escape(repr(vm_type)[1:-1])}: no cloud of this site offers "
            f"that VM type (it has: {escape(', '.join(offered))})"
        )
    if user is None:
        user = os.environ.get("USER", "") or str(os.getuid())
    for _ in range(count):
        try:
            job_id = site.batch.submit(
                JobRequest(command, cores, walltime, user, attributes=attributes)
            )
        except StateFileError:
            raise  # said as FILE: cause
        except BatchError as exc:
            raise fail(f"cannot submit: {exc}") from None
        console.print(job_id)


@state_errors()
def queue(
    config: ConfigOpt = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
) -> None:
    """Show the site's queued and running jobs (with --all, finished ones too on the
    embedded site, a failed one with its exit code or signal and why), in the order the
    batch system would start them."""
    from elasticsite.batch.base import BatchError
    from elasticsite.files import StateFileError
    from elasticsite.model import JobState, state_text

    site = open_configured_site(config, create=False)
    if all_jobs and not site.lists_finished_jobs:
        raise fail("--all needs the embedded batch system; use the batch system's own tools")
    try:
        shown = site.queue(finished=all_jobs)
    except StateFileError:
        raise  # said as FILE: cause
    except BatchError as exc:
        raise fail(f"cannot read the batch system: {exc}") from None
    now = time.time()
    t = Table(show_header=True, header_style="bold")
    for col in ("job", "state", "cores", "walltime", "node", "waited", "command"):
        t.add_column(col)
    for j in shown.jobs:
        waited = (j.started_at or j.finished_at or now) - j.submitted_at
        t.add_row(
            j.id,
            state_text(j),
            str(j.cores),
            f"{j.walltime:g}",
            j.node or "",
            f"{waited:.0f}s",
            j.command,
        )
    console.print(t)
    console.print(", ".join(f"{k} {v}" for k, v in sorted(shown.counts.items())) or "no jobs")
    _unservable(
        [(j.id, shown.unservable[j.id]) for j in shown.jobs
         if j.state is JobState.QUEUED and j.id in shown.unservable]
    )  # fmt: skip


def _unservable(marks: list[tuple[str, str]], limit: int | None = None) -> None:
    """One line per queued job no cloud can run, saying why (the manager's last marks)."""
    from elasticsite.feasibility import explain

    for job_id, why in marks[:limit]:
        say(f"job {job_id}: {explain(why)}")
    if limit is not None and len(marks) > limit:
        console.print(f"... and {len(marks) - limit} more (elasticsite queue lists them)")


@state_errors()
def status(
    config: ConfigOpt = None,
    events: Annotated[NonNegativeInt, typer.Option(help="Show this many recent transitions.")] = 10,
) -> None:
    """Show the manager's workers, their states and the queue, from the state database."""
    site = open_configured_site(config, create=False)
    state = site.status(events=events)
    now = time.time()
    t = Table(show_header=True, header_style="bold", title=f"site {site.config.manager.site_id}")
    for col in ("worker", "node", "cloud", "state", "for", "jobs", "instance", "note"):
        t.add_column(col)
    for r in state.workers:
        w = r.worker
        t.add_row(
            w.id,
            w.node if w.node != w.id else "",
            w.cloud,
            w.state.value,
            f"{now - w.state_since:.0f}s",
            str(w.running_jobs),
            w.instance_id or "",
            r.last_error,
        )
    console.print(t)
    if state.batch_error is not None:  # the workers above come from the store alone
        raise fail(f"cannot read the batch system: {state.batch_error}")
    counts = state.job_counts
    console.print("queue: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "empty"))
    if state.unservable:
        console.print(f"queued jobs no cloud can run (as of the manager's last step): "
                      f"{len(state.unservable)}")  # fmt: skip
        _unservable([(job, why) for job, (why, _) in state.unservable.items()], limit=10)
    if state.context is not None:
        console.print(
            f"context: {state.context.uri} ({len(state.context.pending_removals)} departures "
            "waiting for the broker)",
            highlight=False,
        )
    for name, record in sorted(state.clouds.items()):
        until = record.get("closed_until")
        if until is None:
            closed = "closed until reset (elasticsite cloud reset " + name + ")"
        elif isinstance(until, int | float) and until > now:
            closed = f"closed for {until - now:.0f}s more"
        elif record.get("failures"):
            closed = f"open, {record['failures']} boot failure(s) in a row"
        else:
            continue
        why = f": {record.get('kind')}: {record.get('reason')}" if record.get("kind") else ""
        say(f"cloud {name}: {closed}{why}")
    for line in last_errors(state.cloud_errors, now):
        say(line)
    for line in money_lines(state.spending, site.config.policy.spend_cap_per_hour):
        say(line)
    if state.counters:
        console.print(
            "counters: " + ", ".join(f"{k} {v}" for k, v in sorted(state.counters.items()))
        )
    if state.transitions:
        console.print("recent transitions:")
        for tr in state.transitions:
            when = time.strftime("%H:%M:%S", time.localtime(tr.at))
            before = tr.from_state.value if tr.from_state else "-"
            console.print(
                f"  {when} {tr.worker_id}: {before} -> {tr.to_state.value} ({tr.cause})",
                highlight=False,
            )


def money_lines(view: SpendingView, cap: float | None) -> list[str]:
    """What ``status`` says of the site's money: the rate, what was spent (in total and
    per cloud), and the budget: its period, spent part, forecast and what it held back."""
    from elasticsite.spend import money, refusal_text, utc

    cur = view.currency
    spent = view.spent
    per_cloud = ", ".join(f"{c} {money(v, cur)}" for c, v in sorted(spent.by_cloud.items()))
    rate = f"spending: {money(view.rate, cur)} per hour now"
    rate += f" (cap {money(cap, cur)} per hour)" if cap is not None else ""
    lines = [rate, f"spent: {money(spent.total, cur)} so far ({per_cloud or 'no cloud'})"]
    budget = view.budget
    if budget is None or spent.period is None:
        return lines
    start, end = spent.period
    share = 100 * spent.period_total / budget.amount
    lines.append(
        f"budget: {money(budget.amount, cur)} per {budget.period}, {utc(start)} to "
        f"{utc(end)}: {money(spent.period_total, cur)} spent ({share:.0f}%), forecast "
        f"{money(view.forecast or 0.0, cur)} by the period's end"
    )
    r = view.watch.refused
    if r is not None and r.until == end:  # this period's
        if r.active:
            lines.append(f"budget: refusing since {utc(r.since)}: {refusal_text(r, cur)}")
        else:
            lines.append(f"budget: last refused at {utc(r.last)}: {refusal_text(r, cur)}")
    return lines


def list_policies() -> None:
    """List the provisioning policies available (built in and installed)."""
    from elasticsite import policies

    for name in policies.available():
        fn = policies.get(name).decide
        # a module holding several policies describes each on its function
        module_doc = sys.modules[fn.__module__].__doc__
        own = fn.__doc__ if policies.get(name).redirects else None
        doc = (own or module_doc or fn.__doc__ or "").strip().splitlines()
        line = Text.assemble((name, "bold"), f": {doc[0] if doc else ''}")
        say(line)
