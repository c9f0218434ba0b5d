"""``elasticsite advise``: the deadline advisor's history, probes and evaluation.

``evaluate`` replays a history file (or the site's own) and prints how correct and how
tight the bounds would have been; ``import`` adds a CSV, ``sacct --json`` or SWF file
to the site's history; ``probe`` times staging transfers from the configured
repositories; ``record`` adds one observation, e.g. from an urgent drill's script.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from elasticsite.cli import advise_rank
from elasticsite.cli.common import (
    ConfigOpt,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    config_path,
    console,
    load_site_config,
    say,
    setup_logging,
    state_errors,
)

if TYPE_CHECKING:
    from elasticsite.advisor.evaluate import Cell, Evaluation
    from elasticsite.advisor.probe import ProbeOutcome
    from elasticsite.config import SiteConfig
    from elasticsite.history.observations import HistoryStore, Observation

__all__ = ["advise_app"]

advise_app = typer.Typer(
    help="The deadline advisor: which resource, policy and size meet a deadline.",
    no_args_is_help=True,
)
advise_app.callback(invoke_without_command=True)(advise_rank.advise)  # advise --deadline

FormatOpt = Annotated[
    Literal["csv", "sacct", "swf"] | None,
    typer.Option(
        "--format", "-f", help="csv, sacct (sacct --json) or swf; default: from the name."
    ),
]
ResourceOpt = Annotated[
    str | None,
    typer.Option(help="Resource name for every observation (sacct: default the partition)."),
]
QosOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--qos",
        metavar="QOS=POLICY",
        help="sacct jobs of that QOS ran under that policy (e.g. urgent=next_to_run); repeatable.",
    ),
]
_PHASE_HEADERS = {"input": "input", "allocation": "queue", "execution": "execution"}
_PHASE_HEADERS["output"] = "output"


def fail(message: str) -> typer.Exit:
    """``error: message`` with the message shown as written (``jobs[0]``)."""
    from elasticsite.cli.common import fail as common_fail

    return common_fail(message)


def _probability(value: float) -> float:
    if not 0 < value < 1:
        raise typer.BadParameter(f"must be strictly between 0 and 1 (got {value:g})")
    return value


def _site_store(cfg: SiteConfig) -> HistoryStore:
    from elasticsite.history.observations import HistoryStore, store_path

    return HistoryStore(store_path(cfg.state_dir()))


def _qos_policies(pairs: list[str] | None) -> dict[str, str]:
    from elasticsite.config.advisor import BATCH_POLICIES, CLOUD_POLICIES

    known = dict.fromkeys((*BATCH_POLICIES, *CLOUD_POLICIES))
    policies = {}
    for pair in pairs or ():
        qos, sep, policy = pair.partition("=")
        if not sep or not qos.strip() or policy.strip() not in known:
            raise fail(
                f"--qos: expected QOS=POLICY with a policy among {', '.join(known)}, got {pair!r}"
            )
        policies[qos.strip()] = policy.strip()
    return policies


def _read(
    path: Path, fmt: str | None, resource: str | None, qos: list[str] | None
) -> list[Observation]:
    from elasticsite.advisor.sources import SourceError, read_history

    policies = _qos_policies(qos)
    if not path.exists():
        raise fail(f"{path}: no such file")
    try:
        return list(read_history(path, fmt, resource=resource, qos_policies=policies))  # type: ignore[arg-type]
    except SourceError as exc:
        raise fail(str(exc)) from None


@advise_app.command("evaluate")
@state_errors()
def evaluate(
    history: Annotated[
        Path | None,
        typer.Argument(help="A CSV, sacct --json or SWF file; default: the site's history."),
    ] = None,
    fmt: FormatOpt = None,
    quantile: Annotated[float, typer.Option(callback=_probability)] = 0.95,
    confidence: Annotated[float, typer.Option(callback=_probability)] = 0.95,
    seed: Annotated[
        NonNegativeInt, typer.Option(help="Observations per key that only seed the history.")
    ] = 0,
    resource: ResourceOpt = None,
    qos: QosOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    config: ConfigOpt = None,
) -> None:
    r"""Replay a history in time order: predict each delay's bound before it happens,
    then report correctness and over-prediction per resource, policy and phase.

    With a site configuration (``-c``, or when no file is given) its ``\[advisor]`` size
    classes apply and its clouds' allocations are kept per exact instance count."""
    from elasticsite.advisor.evaluate import evaluate as replay
    from elasticsite.advisor.sizes import SizeClasses

    sizes, clouds = SizeClasses(), set[str]()
    if history is None or config is not None:
        cfg = load_site_config(config)
        sizes = SizeClasses.parse(cfg.advisor.size_classes)
        clouds = {r.name for r in cfg.advisor.resources if r.kind == "cloud"}
    if history is None:
        store = _site_store(cfg)
        observations = store.observations()
        name = str(store.path)
    else:
        observations = _read(history, fmt, resource, qos)
        name = str(history)
    if not any(o.phase != "probe" for o in observations):
        raise fail(f"{name}: no observations to evaluate")
    result = replay(
        observations,
        quantile=quantile,
        confidence=confidence,
        seed=seed,
        size_classes=sizes,
        exact_sizes=clouds,
    )
    if as_json:
        console.print_json(json.dumps({"history": name, **result.to_dict()}))
        return
    _print_evaluation(name, result)


def _percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}%"


def _share(cell: Cell | None, digits: int = 1) -> str:
    if cell is None or cell.correctness is None:
        return "-"
    return _percent(100 * cell.correctness, digits)


def _over(cell: Cell | None, digits: int = 1) -> str:
    return "-" if cell is None else _percent(cell.accuracy, digits)


def _table(*columns: str, labels: int = 2) -> Table:
    """A table whose first ``labels`` columns are names and the others figures."""
    table = Table(show_header=True, header_style="bold")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < labels else "right")
    return table


def _print_evaluation(name: str, result: Evaluation) -> None:
    """Paper 004's Tables 3.3 and 3.4 (per resource and policy, per phase and overall)
    and 4.25 (per size class), then what could not be predicted and why."""
    phases = [p for p in _PHASE_HEADERS if any(p in row.cells for row in result.rows)]
    shown = [*phases, "overall"] if any(r.trials for r in result.rows) else phases
    heads = [_PHASE_HEADERS.get(p, p) for p in shown]
    say(
        f"{name}: {result.observations:,} observations; bounds on the {result.quantile:g} "
        f"quantile at {result.confidence:g} confidence"
    )
    console.print(
        f"predicted {result.predicted:,}, not predicted {result.not_predicted:,} "
        f"(listed last), seeded {result.seeded:,}",
        highlight=False,
    )
    console.print("\ncorrectness: the share of delays at or under their bound", highlight=False)
    correct = _table("resource", "policy", "trials", *heads)
    for row in result.rows:
        cells = [row.cells.get(p) for p in shown]
        correct.add_row(row.resource, row.policy, f"{row.trials or '-'}", *map(_share, cells))
    console.print(correct)
    console.print(
        "accuracy: over-prediction, 100 x (sum of bounds - sum of delays) / sum of delays",
        highlight=False,
    )
    accurate = _table("resource", "policy", *heads)
    for row in result.rows:
        accurate.add_row(row.resource, row.policy, *(_over(row.cells.get(p)) for p in shown))
    console.print(accurate)
    for phase in ("allocation", "execution"):  # staging does not depend on the size
        _print_sizes(result, phase)
    if result.unpredicted:
        console.print("not predicted:", highlight=False)
    for u in result.unpredicted[:20]:
        what = " ".join(
            part
            for part in (
                u.resource,
                u.policy,
                _PHASE_HEADERS[u.phase],
                u.detail,
                f"nodes {u.size}" if u.size else "",
            )
            if part
        )
        say(f"  {what}: {u.count:,} of {u.of:,} ({u.reason})")
    if len(result.unpredicted) > 20:
        console.print(f"  ... and {len(result.unpredicted) - 20} more", highlight=False)


def _predicted(cell: Cell | None) -> bool:
    return cell is not None and cell.predicted > 0


def _print_sizes(result: Evaluation, phase: str) -> None:
    """One row of correctness and one of over-prediction per resource and policy, one
    column per size class (nodes), for the rows and classes that had predictions."""
    rows = [r for r in result.rows if any(c.predicted for c in r.sizes.get(phase, {}).values())]
    labels = [s for s in result.sizes if any(_predicted(r.sizes[phase].get(s)) for r in rows)]
    if not labels:
        return
    console.print(
        f"{_PHASE_HEADERS[phase]} by size class (nodes): correctness, over-prediction",
        highlight=False,
    )
    table = _table("resource", "policy", "", *labels, labels=3)
    for row in rows:
        cells = [row.sizes[phase].get(label) for label in labels]
        table.add_row(row.resource, row.policy, "correct", *(_share(c, 0) for c in cells))
        table.add_row("", "", "over", *(_over(c, 0) for c in cells))
    console.print(table)


@advise_app.command("import")
@state_errors()
def import_history(
    file: Annotated[Path, typer.Argument(help="A CSV, sacct --json or SWF file.")],
    fmt: FormatOpt = None,
    resource: ResourceOpt = None,
    qos: QosOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Add a history file to the site's history (nothing twice: jobs are matched by id)."""
    cfg = load_site_config(config)
    observations = _read(file, fmt, resource, qos)
    store = _site_store(cfg)
    added = store.add(observations)
    say(f"{file}: {added:,} new observations of {len(observations):,} into {store.path}")


@advise_app.command("probe")
@state_errors()
def probe(
    config: ConfigOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Probe each repository once, then stop.")
    ] = False,
    resource: Annotated[
        str | None, typer.Option(help="Where the data is staged to; default: the site's id.")
    ] = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
) -> None:
    """Time a transfer from every configured repository, each every period, and record
    the seconds per byte in the site's history; failures are recorded and logged."""
    from elasticsite.advisor.probe import run_probes

    setup_logging(verbose)
    cfg = load_site_config(config)
    if not cfg.advisor.repositories:
        raise fail(f"{config_path(config)}: no [[advisor.repositories]] to probe")
    store = _site_store(cfg)
    try:
        run_probes(
            cfg.advisor,
            store,
            resource=resource or cfg.manager.site_id,
            once=once,
            report=_print_outcome,
        )
    except KeyboardInterrupt:
        console.print("stopped", highlight=False)


def _print_outcome(outcome: ProbeOutcome) -> None:
    note = "" if outcome.recorded else " (not recorded: the history cannot be written)"
    if outcome.observation is not None:
        o = outcome.observation
        nbytes = o.nbytes or 0
        seconds = o.value * nbytes
        rate = f"{nbytes / seconds / 2**20:,.1f} MiB/s" if seconds > 0 else "instant"
        console.print(
            f"{outcome.repository}: {nbytes / 2**20:,.1f} MiB in {seconds:.2f} s ({rate}){note}",
            highlight=False,
        )
    elif outcome.failure is not None:
        say(f"{outcome.repository}: failed: {outcome.failure.error}{note}")


@advise_app.command("record")
@state_errors()
def record(
    phase: Annotated[str, typer.Option(help="input, allocation, execution or output.")],
    resource: Annotated[str, typer.Option(help="Cluster, partition or cloud.")],
    value: Annotated[NonNegativeFloat, typer.Option(help="How long the phase took, in seconds.")],
    policy: Annotated[str, typer.Option()] = "default",
    nodes: Annotated[
        PositiveInt, typer.Option(help="Nodes (a cloud: instances asked at once).")
    ] = 1,
    repository: Annotated[str, typer.Option(help="Where input came from.")] = "",
    app_name: Annotated[str, typer.Option("--app", help="The application that ran.")] = "",
    nbytes: Annotated[NonNegativeInt | None, typer.Option(help="Bytes staged.")] = None,
    at: Annotated[
        str | None, typer.Option(help="When it ended: epoch seconds or ISO 8601; default now.")
    ] = None,
    ref: Annotated[str, typer.Option(help="An id, so the same run is never recorded twice.")] = "",
    trial: Annotated[str, typer.Option(help="Groups the phases of one urgent run.")] = "",
    config: ConfigOpt = None,
) -> None:
    """Add one observed phase of an urgent run (a drill) to the site's history."""
    from elasticsite.advisor.sources import parse_time
    from elasticsite.history.observations import Observation

    cfg = load_site_config(config)
    try:
        when = time.time() if at is None else parse_time(at)
    except ValueError as exc:
        raise fail(f"--at: {exc}") from None
    try:
        observation = Observation(
            phase=phase,
            resource=resource,
            policy=policy,
            nodes=nodes,
            repository=repository,
            app=app_name,
            value=value,
            nbytes=nbytes,
            at=when,
            source="drill",
            ref=ref,
            trial=trial,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    store = _site_store(cfg)
    if store.add([observation]):
        console.print(
            f"recorded {phase} of {value:g} s on {resource} ({policy}, {nodes} nodes)",
            highlight=False,
        )
    else:
        console.print(f"already recorded: {phase} of {ref} on {resource}", highlight=False)
