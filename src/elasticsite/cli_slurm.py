"""``elasticsite slurm resume|suspend|fail NODELIST``: Slurm's power-saving programs.

Set in ``slurm.conf`` as ``ResumeProgram``, ``SuspendProgram`` and
``ResumeFailProgram`` (through a two-line wrapper that names the configuration; see
``docs/slurm.md``). With ``batch.mode = "power_save"`` each call queues its nodes in
the site's state store and returns at once, as slurmctld expects; the running manager
carries them out at its next step, with the same clouds, caps, spend limit, retries
and restart safety as in external mode. With ``batch.mode = "external"`` the calls
are only acknowledged and logged: the manager declared those nodes (``State=CLOUD``)
and brings them up itself, and slurmctld merely waits for them to register.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ConfigOpt", "slurm_app"]

slurm_app = typer.Typer(
    help="Slurm's power saving hooks: set these as ResumeProgram, SuspendProgram and "
    "ResumeFailProgram.",
    no_args_is_help=True,
)

ConfigOpt = Annotated[  # shared by every command that reads a site configuration
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Site configuration (TOML). Default: $ELASTICSITE_CONFIG, else ./elasticsite.toml.",
        show_default=False,
    ),
]
NodeList = Annotated[str, typer.Argument(help="Slurm host list, e.g. cloud[1-3,7]")]


def _valid_fds() -> None:
    """slurmctld starts its programs with fds 0-2 closed: fill them with /dev/null so
    no file opened later (the state store) can become our stdout."""
    while True:
        fd = os.open(os.devnull, os.O_RDWR)
        if fd > 2:
            os.close(fd)
            return


def _queue(action: str, nodelist: str, config: Path | None, label: str) -> None:
    _valid_fds()
    from elasticsite.batch.hostlist import HostlistError, expand
    from elasticsite.config import ConfigError, load_config
    from elasticsite.files import StateFileError, private_dir
    from elasticsite.manager.store import StateStore

    path = config or Path(os.environ.get("ELASTICSITE_CONFIG", "elasticsite.toml"))
    try:
        cfg = load_config(path)
        if cfg.batch.type != "slurm":
            raise ConfigError(f"{path}: batch.type is {cfg.batch.type!r}, not 'slurm'")
        nodes = expand(nodelist)
    except (ConfigError, HostlistError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # Absolute in power_save mode (the configuration insists); else next to the config.
    state_dir = cfg.state_dir(path.resolve().parent)
    try:
        private_dir(state_dir)
        if cfg.batch.mode == "power_save":
            store = StateStore(state_dir / "manager.db")
            try:
                store.add_power_requests(action, nodes, time.time())
            finally:
                store.close()
    except StateFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if cfg.batch.mode != "power_save":
        # External mode: the manager declared these nodes and brings them up (and down)
        # itself; Slurm's power saving only waits for them to register.
        label += " (external mode: acknowledged, the manager drives these nodes)"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(state_dir / "power.log", "a", encoding="utf-8") as log:  # what slurmctld asked
        log.write(f"{stamp} pid {os.getpid()}: {label} {nodelist} ({len(nodes)} nodes)\n")


@slurm_app.command()
def resume(nodelist: NodeList, config: ConfigOpt = None) -> None:
    """Power up these nodes: the manager launches a cloud worker for each (ResumeProgram)."""
    _queue("resume", nodelist, config, "resume")


@slurm_app.command()
def suspend(nodelist: NodeList, config: ConfigOpt = None) -> None:
    """Power down these nodes: the manager terminates their workers (SuspendProgram)."""
    _queue("suspend", nodelist, config, "suspend")


@slurm_app.command()
def fail(nodelist: NodeList, config: ConfigOpt = None) -> None:
    """These nodes missed ResumeTimeout: terminate whatever was started (ResumeFailProgram)."""
    _queue("suspend", nodelist, config, "resume failed")
