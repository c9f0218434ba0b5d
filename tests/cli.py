"""The ``elasticsite`` command line as a person runs it, for tests: a real process in a
directory of the test's own, which is also its HOME, with a plain PATH; and the site
files a person writes for it, at test speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests import forked_cli


def argv(*args: str) -> list[str]:
    """The command line ``elasticsite ARGS`` with this interpreter."""
    return [sys.executable, "-m", "elasticsite", *args]


def run_command(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``elasticsite ARGS`` run in ``cwd`` (this process's by default) with ``env`` (this
    process's by default) and nothing on its stdin, its output captured as text, as
    ``subprocess.run`` would; with ``check``, a non-zero exit raises. The command is a
    process of its own, forked from one that imported the command line already
    (:mod:`tests.forked_cli`), which saves each test the half second of CPU a start
    costs."""
    where = Path.cwd() if cwd is None else cwd
    environment = dict(os.environ if env is None else env)
    if forked_cli.enabled():
        done = forked_cli.run(list(args), cwd=where, env=environment, timeout=timeout)
    else:
        done = subprocess.run(
            argv(*args),
            cwd=where,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if check:
        done.check_returncode()
    return done


def run_cli(
    *args: str, cwd: Path, check: bool = False, columns: int = 120, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``elasticsite ARGS`` as a person runs it: in ``cwd``, which is also its HOME, with
    a plain PATH, on a terminal ``columns`` wide (:func:`run_command`)."""
    env = {"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return run_command(*args, cwd=cwd, env=env, timeout=timeout, check=check)


def site_file(directory: Path, template: str, **values: object) -> tuple[Path, Path]:
    """Write ``directory/site.toml`` from ``template``, whose ``{state}`` is
    ``directory/state`` and whose other fields are ``values``; the file and that state
    directory."""
    state = directory / "state"
    cfg = directory / "site.toml"
    cfg.write_text(template.format(state=state, **values))
    return cfg, state


def start_run(cfg: Path, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``elasticsite run -c CFG OPTIONS`` in the background, its output added to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(argv("run", "-c", str(cfg), *options), stdout=out, stderr=out)


def toml_value(value: object) -> str:
    """``value`` (a string, number, boolean or list of them) written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def toml_table(header: str, keys: Mapping[str, object]) -> str:
    """The TOML table ``[header]`` (or ``[[header]]``, written so) holding ``keys``."""
    if not header.startswith("[["):
        header = f"[{header}]"
    return "\n".join([header, *(f"{k} = {toml_value(v)}" for k, v in keys.items())]) + "\n"


MINIMAL_SITE = """\
[manager]
site_id = "lab"
state_dir = "state"

[[clouds]]
name = "local"
"""
"""A site file with nothing but what must be given: the manager's defaults and one local
cloud."""


def local_cloud(
    name: str,
    max_instances: int,
    *,
    boot_time: float = 0.3,
    jitter: float | None = 0.1,
    seed: int | None = None,
    vm_types: Iterable[Mapping[str, object]] = (),
    **more: object,
) -> str:
    """A ``[[clouds]]`` table of the embedded local cloud at test speed: its workers boot
    in ``boot_time`` s (give or take ``jitter``, drawn from ``seed``) and stop in 0.1 s;
    ``more`` are the cloud's other keys. Written without inline tables (hence without
    braces), so that it can stand in a :func:`site_file` template."""
    keys = {"name": name, "max_instances": max_instances, **more}
    text = toml_table("[[clouds]]", {**keys, "boot_time": boot_time, "shutdown_time": 0.1})
    for vm_type in vm_types:
        text += toml_table("[[clouds.vm_types]]", vm_type)
    options: dict[str, object] = {"poll_interval": 0.1}
    if jitter is not None:
        options["boot_jitter"] = jitter
    if seed is not None:
        options["seed"] = seed
    return text + toml_table("clouds.options", options)


def site_toml(
    site_id: str,
    *clouds: str,
    state_dir: str = "{state}",
    policy: str | Mapping[str, object] = "on_demand",
    extra: str = "",
    **manager: object,
) -> str:
    """A site file whose manager loops every 0.2 s (and retries as often), with the
    ``[manager]`` keys ``manager``, the policy named ``policy`` (or the ``[policy]`` table
    it maps), the ``clouds`` of :func:`local_cloud` and, last, the tables ``extra``
    (TOML text). Its only braces are those of ``state_dir``: by default the text
    is a :func:`site_file` template."""
    keys = {"site_id": site_id, "state_dir": state_dir, "interval": 0.2, "retry_backoff": 0.2}
    settings = {"name": policy} if isinstance(policy, str) else policy
    tables = [toml_table("manager", {**keys, **manager}), toml_table("policy", settings)]
    return "\n".join([*tables, *clouds, *([extra] if extra else [])])
