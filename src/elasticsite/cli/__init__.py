"""The ``elasticsite`` command (typer): one module per command group, each command
thin (parse, call one library function, render).

``common`` holds what commands share; ``site`` the configured site (run, submit,
queue, status, policies); ``jobs`` one job at a time (cancel, job); ``down``; ``demo``;
``sim`` (simulate, experiment); ``reproduce``; ``agent``; ``broker``; ``context``;
``slurm`` (Slurm's power-saving hooks); ``cloud`` (reset); ``advise`` (the deadline
advisor); ``urgent`` (keys).
"""

from __future__ import annotations

from typing import Annotated

import typer

from elasticsite import __version__
from elasticsite.cli import (
    advise,
    agent,
    broker,
    cloud,
    context,
    demo,
    down,
    jobs,
    reproduce,
    sim,
    site,
    slurm,
    urgent,
)
from elasticsite.cli.common import OneLineErrors, console

__all__ = ["app"]

app = typer.Typer(
    cls=OneLineErrors,
    help="Extend a batch cluster into IaaS clouds on demand.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    """Options before any command: ``--version`` prints the version and stops."""
    if version:
        console.print(f"elasticsite {__version__}")
        raise typer.Exit()


# Registered in the order ``elasticsite --help`` lists them.
app.command(name="demo")(demo.demo)
app.command(name="run")(site.run)
app.command(name="down")(down.down)
app.command(name="submit")(site.submit)
app.command(name="queue")(site.queue)
app.command(name="status")(site.status)
app.command(name="cancel")(jobs.cancel)
app.command(name="job")(jobs.job)
app.command(name="simulate")(sim.simulate)
app.command(name="experiment")(sim.experiment)
app.command(name="reproduce")(reproduce.reproduce)
app.command(name="agent")(agent.agent)
app.command(name="policies")(site.list_policies)
app.command(name="broker")(broker.broker)
app.add_typer(slurm.slurm_app, name="slurm")
app.add_typer(context.context_app, name="context")
app.add_typer(cloud.cloud_app, name="cloud")
app.add_typer(advise.advise_app, name="advise")
app.add_typer(urgent.urgent_app, name="urgent")
