"""``elasticsite advise --deadline 6h``: rank the site's configurations against a deadline.

Parses the deadline, asks :meth:`~elasticsite.advisor.service.Advisor.advise` once and
renders its answer: a table of the configurations likely enough, the suggestion, the
best speculative pair, and what was dropped and why. Exit status 0 when some
configuration is likely enough, 1 when none is, 2 for an error (one line on stderr).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table

from elasticsite.cli.common import ConfigOpt, config_path, console, fail, load_site_config, say

if TYPE_CHECKING:
    from elasticsite.advisor.rank import Ranked
    from elasticsite.advisor.service import Advice

__all__ = ["advise"]

_PHASES = ("input", "allocation", "execution", "output")
_DROPPED_SHOWN = 20
_LEFT = ("resource", "repository", "policy")


def _threshold(value: float | None) -> float | None:
    if value is not None and not 0 <= value <= 1:
        raise typer.BadParameter(f"must be between 0 and 1 (got {value:g})")
    return value


def advise(
    ctx: typer.Context,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            "-d",
            help="When the results are needed, from now: 6h, 90m, 1h30m, 2d or seconds.",
            show_default=False,
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Least probability worth starting; default: the site's \\[advisor] threshold.",
            callback=_threshold,
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Rank every configuration (resource x nodes x repository x policy) by its chance of
    meeting a deadline; exit status 1 when none is likely enough."""
    if ctx.invoked_subcommand is not None:
        return
    if deadline is None:
        raise fail("give --deadline (e.g. --deadline 6h), or a command; see --help")
    from elasticsite.advisor.deadline import DeadlineError, parse_deadline
    from elasticsite.advisor.service import Advisor, NothingToRank
    from elasticsite.files import StateFileError
    from elasticsite.history.observations import HistoryStore, store_path

    try:
        seconds = parse_deadline(deadline)
    except DeadlineError as exc:
        raise fail(f"--deadline: {exc}") from None
    cfg = load_site_config(config)
    try:
        store = HistoryStore(store_path(cfg.state_dir()))
        advice = Advisor(store, cfg.advisor).advise(seconds, threshold)
    except StateFileError as exc:
        raise fail(str(exc)) from None
    except NothingToRank as exc:
        raise fail(f"{config_path(config)}: {exc}") from None
    if as_json:
        console.print_json(json.dumps(advice.to_json()))
    else:
        _render(advice, deadline)
    raise typer.Exit(0 if advice.ranked else 1)


def _probability(p: float) -> str:
    return f"{p:.4f}"


def _duration(seconds: float) -> str:
    """Like ``5h30m`` or ``12m30s``; tenths under ten seconds (``0.4s``), where whole
    seconds would hide the difference between short phases."""
    from elasticsite.advisor.rank import duration

    return f"{seconds:.1f}s" if seconds < 9.95 else duration(seconds)


def _render(advice: Advice, written: str) -> None:
    quantiles = ", ".join(f"{q:g}" for q in advice.quantiles)
    say(
        f"deadline {written.strip()} ({advice.deadline:,.0f} s): phase bounds at quantiles "
        f"{quantiles} with {advice.confidence:g} confidence, from "
        f"{advice.observations:,} observations"
    )
    if advice.ranked:
        console.print(_table(advice))
    else:
        console.print(
            f"no configuration is likely enough (probability >= {advice.threshold:g})",
            highlight=False,
        )
    s = advice.suggestion
    if s is not None:
        assert s.composite is not None
        say(
            f"suggested: {s.configuration.label}: probability "
            f"{_probability(s.probability)} of finishing within "
            f"{_duration(s.composite.bound)}"
        )
    spec = advice.speculative
    if spec is not None:
        both = " + ".join(m.configuration.label for m in spec.members)
        say(
            f"speculative: {both}: probability {_probability(spec.probability)} that "
            "one finishes in time"
        )
    elif advice.speculative_reason:
        say(f"speculative: none ({advice.speculative_reason})")
    if advice.dropped:
        console.print(f"dropped ({len(advice.dropped)}):", highlight=False)
        for r in advice.dropped[:_DROPPED_SHOWN]:
            say(f"  {r.configuration.label}: {r.reason}")
        if len(advice.dropped) > _DROPPED_SHOWN:
            console.print(f"  ... and {len(advice.dropped) - _DROPPED_SHOWN} more")


def _table(advice: Advice) -> Table:
    shown = [p for p in _PHASES if any(_has(r, p) for r in advice.ranked)]
    table = Table(
        title=f"likely enough (probability >= {advice.threshold:g}); per phase: quantile bound",
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )
    for column in ("resource", "nodes", "repository", "policy", "probability", "bound"):
        table.add_column(column, justify="left" if column in _LEFT else "right", no_wrap=True)
    for phase in shown:
        table.add_column(phase, justify="right", no_wrap=True)
    for r in advice.ranked:
        c, comp = r.configuration, r.composite
        assert comp is not None
        table.add_row(
            c.resource,
            str(c.nodes),
            c.repository or "-",
            c.policy,
            _probability(r.probability),
            _duration(comp.bound),
            *(_phase_cell(r, p) for p in shown),
        )
    return table


def _has(r: Ranked, phase: str) -> bool:
    return r.composite is not None and phase in r.composite.quantiles


def _phase_cell(r: Ranked, phase: str) -> str:
    comp = r.composite
    if comp is None or phase not in comp.quantiles:
        return "-"
    return f"{comp.quantiles[phase]:g} {_duration(comp.bounds[phase])}"
