"""What the ``elasticsite`` commands share: the consoles and the one way to print a
plain line on them, one-line errors, the checked number types of every numeric option,
the ``--config`` option, opening the configured site, logging and the metrics table.

Every failure a person can fix is one line on stderr, ``error: ...``, and exit
status 2, a value typer refuses included; nothing here decides anything about the
site.

Nothing printed is read as console markup: the consoles print strings as they are
(``[urgent]``, a job's ``[bold]`` stay as written), and a command that styles a part
of its output says so with :class:`rich.text.Text`. Help texts are shown as written
too (:class:`OneLineErrors` escapes them for typer's rich help).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import typer
from pydantic import Field
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup
from typing_extensions import TypeAliasType

from elasticsite import logs

if TYPE_CHECKING:
    from elasticsite.config import SiteConfig, UrgentConfig
    from elasticsite.manager.loop import Manager
    from elasticsite.manager.site import Site
    from elasticsite.metrics import Row

__all__ = [
    "ConfigOpt",
    "LogFormatOpt",
    "NonNegativeFloat",
    "NonNegativeInt",
    "OneLineErrors",
    "Port",
    "PositiveFloat",
    "PositiveInt",
    "announce",
    "config_path",
    "console",
    "err",
    "error_line",
    "fail",
    "finite",
    "load_site_config",
    "open_configured_site",
    "open_site_manager",
    "print_metrics",
    "say",
    "setup_logging",
    "state_errors",
    "tell",
    "urgent_section",
]

# No markup and no emoji codes: paths, names, messages, job commands, ids, fingerprints
# and keys ("[urgent]", ":CD:") are shown as they are.
console = Console(emoji=False, markup=False)
err = Console(stderr=True, emoji=False, markup=False)


def say(text: RenderableType) -> None:
    """Print ``text`` on stdout as written: no highlighting, and a long line is never
    wrapped, so a path or a command at its end stays whole (and greppable)."""
    console.print(text, highlight=False, soft_wrap=True)


def tell(text: RenderableType) -> None:
    """:func:`say` on stderr: the notes and warnings that are not the command's output."""
    err.print(text, highlight=False, soft_wrap=True)


# The type of every numeric option: a value out of range, and for floats inf or nan,
# is refused by typer as ``Invalid value for '--port': ...``, before the command runs.
# An option with a range of its own (``min=0.1``) is a plain float with that range and
# the ``finite`` callback. tests/test_cli_numbers.py holds every option to this.
Port = TypeAliasType("Port", Annotated[int, Field(ge=1, le=65535)])
PositiveInt = TypeAliasType("PositiveInt", Annotated[int, Field(ge=1)])
NonNegativeInt = TypeAliasType("NonNegativeInt", Annotated[int, Field(ge=0)])
PositiveFloat = TypeAliasType("PositiveFloat", Annotated[float, Field(gt=0, allow_inf_nan=False)])
NonNegativeFloat = TypeAliasType(
    "NonNegativeFloat", Annotated[float, Field(ge=0, allow_inf_nan=False)]
)


def finite(value: float | None) -> float | None:
    """The callback of a float option with a range of its own: refuses inf (which the
    range lets through) as typer refuses any other bad value."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"Input should be a finite number, not {value}")
    return value


class OneLineErrors(TyperGroup):
    """The command group: a value or an option typer refuses is one line on stderr,
    ``error: Invalid value for '--port': ...``, and exit status 2, like every other
    error of the commands (typer's own display is a framed box under the usage)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        _help_as_written(self)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as exc:
            if type(exc).__name__ != "NoArgsIsHelpError":  # the help was printed instead
                ctx = getattr(exc, "ctx", None)
                message = exc.format_message().rstrip(".")
                if ctx is not None:
                    message += f" (see {ctx.command_path} --help)"
                tell(error_line(message))
            sys.exit(exc.exit_code)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _help_as_written(command: Any) -> None:
    """Escape every help text of ``command`` (a click command or group) and of what it
    holds, once, so typer's rich help shows it as written: ``[urgent]`` in a help text
    is a section's name, not a style."""
    if getattr(command, "_help_as_written", False):
        return
    command._help_as_written = True
    for holder in (command, *command.params):
        for attr in ("help", "short_help", "epilog"):
            text = getattr(holder, attr, None)
            if isinstance(text, str):
                setattr(holder, attr, escape(text))
    for sub in getattr(command, "commands", {}).values():
        _help_as_written(sub)


ConfigOpt = Annotated[  # shared by every command that reads a site configuration
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Site configuration (TOML). Default: $ELASTICSITE_CONFIG, else ./elasticsite.toml.",
        show_default=False,
    ),
]


class Summary(Protocol):
    """Metrics that list themselves as (label, value, unit) rows."""

    def to_rows(self) -> list[Row]: ...


LogFormat = Literal["human", "json"]

LogFormatOpt = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar="ELASTICSITE_LOG_FORMAT",
        help="human (the default) or json: one JSON object per line, with the site, "
        "worker, instance, job and cloud ids that apply.",
    ),
]


_log_format: LogFormat = "human"


def setup_logging(verbose: int, log_format: LogFormat = "human", site: str | None = None) -> None:
    """Warnings only by default; ``-v`` adds progress, ``-vv`` debugging."""
    global _log_format
    _log_format = log_format
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    # On a terminal, rich's columns; elsewhere (a file, a pipe, journald) one plain line
    # per record, never wrapped, so a path at its end stays whole.
    if err.is_terminal:
        logs.setup(level, err, log_format=log_format, site=site)
    else:
        logs.setup(level, None, "%(asctime)s %(levelname)s %(message)s", log_format=log_format,
                   site=site)  # fmt: skip


def announce(text: str, level: int = logging.INFO) -> None:
    """A message the operator must see whatever the verbosity: a plain line on stderr,
    or with ``--log-format json`` a log line like every other (so stderr stays one JSON
    object per line)."""
    if _log_format == "json":
        logger = logging.getLogger("elasticsite.cli")
        logger.handle(logger.makeRecord(logger.name, level, "", 0, text, (), None))
    else:
        tell(text)


def error_line(message: str) -> Text:
    """``error: message``, the word in bold red, the message as written."""
    return Text.assemble(("error:", "bold red"), " ", message)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on stderr (as written: no markup); raise the result to
    end with status 2."""
    tell(error_line(message))
    return typer.Exit(2)


@contextmanager
def state_errors() -> Iterator[None]:
    """A state file that cannot be used (corrupt, locked by another process, unwritable)
    ends the command with its one-line ``FILE: cause``, exit status 2, no traceback.

    Decorates every command that opens the site's state."""
    from elasticsite.files import StateFileError

    try:
        yield
    except StateFileError as exc:
        raise fail(str(exc)) from None


def config_path(config: Path | None) -> Path:
    """The configuration file: ``--config``, else $ELASTICSITE_CONFIG, else ./elasticsite.toml."""
    return config or Path(os.environ.get("ELASTICSITE_CONFIG", "elasticsite.toml"))


def load_site_config(config: Path | None) -> SiteConfig:
    """The validated configuration; a missing or bad file is one error line."""
    from elasticsite.config import ConfigError, load_config

    path = config_path(config)
    if not path.exists():
        raise fail(
            f"no configuration at {path}; pass --config FILE "
            "(examples/local.toml runs the embedded site)"
        )
    try:
        return load_config(path)
    except ConfigError as exc:
        raise fail(str(exc)) from None


def open_configured_site(config: Path | None, *, create: bool = True) -> Site:
    """The configured site; a bad option (named with its file) or an unusable state file
    is one error line.

    Without ``create`` (the commands that read the site, or act on its jobs) nothing is
    created: a site with no state yet is one error line saying where it looked and
    how a site starts."""
    from elasticsite.config import ConfigError
    from elasticsite.manager.site import NoSiteState, open_site

    cfg = load_site_config(config)
    try:
        return open_site(cfg, create=create)
    except ConfigError as exc:
        raise fail(f"{config_path(config)}: {exc}") from None
    except NoSiteState as exc:
        path = config_path(config)
        raise fail(
            f"no site state at {exc.state_dir} (the state_dir of {path}): its manager has "
            f"not run and no job was submitted there; `elasticsite run -c {path}` starts it"
        ) from None


def urgent_section(config: Path | None) -> UrgentConfig:
    """The site's ``[urgent]`` section, for the urgent commands; a site without one is
    one error line, before anything of the site is opened or created."""
    cfg = load_site_config(config).urgent
    if cfg is None:
        raise fail(f"{config_path(config)}: no [urgent] section: this site takes no urgent jobs")
    return cfg


def open_site_manager(
    config: Path | None, verbose: int, log_format: LogFormat
) -> tuple[Site, Manager]:
    """The configured site and its manager, with logging set up for the site (what
    ``run`` and ``down`` start from); a bad configuration is one error line."""
    site = open_configured_site(config)
    setup_logging(verbose, log_format, site.config.manager.site_id)
    try:
        return site, site.manager()
    except ValueError as exc:
        raise fail(f"{config_path(config)}: {exc}") from None


def print_metrics(metrics: Summary) -> None:
    """The summary table of a demo or a simulation."""
    table = Table(title="Summary", show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for label, value, unit in metrics.to_rows():
        if value is None:
            shown = "-"
        elif isinstance(value, float):
            shown = f"{value:,.2f}" if unit == "money" else f"{value:,.1f}"
        else:
            shown = f"{value:,}"
        table.add_row(label, shown, unit)
    console.print(table)
