"""``elasticsite slurm resume|suspend|fail NODELIST``: Slurm's power-saving programs.

Set in ``slurm.conf`` as ``ResumeProgram``, ``SuspendProgram`` and
``ResumeFailProgram`` (through a two-line wrapper that names the configuration; see
``docs/slurm.md``). With ``batch.mode = "power_save"`` each call queues its nodes in
the site's state store and returns at once, as slurmctld expects; the running manager
carries them out at its next step, with the same clouds, caps, spend limit, retries
and restart safety as in external mode. With ``batch.mode = "external"`` the calls
are only acknowledged and logged: the manager declared those nodes (``State=CLOUD``)
and brings them up itself, and slurmctld merely waits for them to register.

Each call says on stdout what it did (queued or only acknowledged, for which site,
and where its log is), for the operator who runs one by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from elasticsite.cli.common import ConfigOpt, config_path

__all__ = ["slurm_app"]

slurm_app = typer.Typer(
    help="Slurm's power saving hooks: set these as ResumeProgram, SuspendProgram and "
    "ResumeFailProgram.",
    no_args_is_help=True,
)

NodeList = Annotated[str, typer.Argument(help="Slurm host list, e.g. cloud[1-3,7]")]


def _valid_fds() -> None:
    """slurmctld starts its programs with fds 0-2 closed: fill them with /dev/null so
    no file opened later (the state store) can become our stdout."""
    while True:
        fd = os.open(os.devnull, os.O_RDWR)
        if fd > 2:
            os.close(fd)
            return


_WHAT = {
    "resume": "starts a worker for each",
    "suspend": "terminates their workers",
    "resume failed": "terminates whatever was started for them",
}
"""What the manager does with the nodes of each call, as its line says."""


def _queue(action: str, nodelist: str, config: Path | None, label: str) -> None:
    """Check the configuration and the host list, then hand the request to the manager.

    Errors are plain ``error: ...`` lines (slurmctld logs them as they are), exit 2."""
    _valid_fds()
    from elasticsite.batch.hostlist import HostlistError, expand
    from elasticsite.config import ConfigError, load_config
    from elasticsite.files import StateFileError
    from elasticsite.manager.site import request_power

    path = config_path(config)
    try:
        cfg = load_config(path)
        if cfg.batch.type != "slurm":
            raise ConfigError(f"{path}: batch.type is {cfg.batch.type!r}, not 'slurm'")
        nodes = expand(nodelist)
    except (ConfigError, HostlistError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        request_power(cfg, action, nodes, label=label, nodelist=nodelist)
    except StateFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    count = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    site, log = cfg.manager.site_id, cfg.state_dir() / "power.log"
    if cfg.batch.mode == "power_save":
        typer.echo(
            f"{label} {nodelist}: {count} queued for site {site!r}; its manager "
            f"{_WHAT[label]} at its next step (log: {log})"
        )
    else:
        typer.echo(
            f"{label} {nodelist}: {count} acknowledged, nothing queued: in external mode "
            f"the manager of site {site!r} brings its nodes up and down itself (log: {log})"
        )


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
