"""User data that turns a stock Debian, Ubuntu or RHEL-family image into a worker.

Without ``[bootstrap]`` in the site file, a worker's user data is a cloud-config that
writes its settings to ``/etc/elasticsite/worker.env`` (:func:`worker_userdata`), for
an image that knows what to do with them. With it, :func:`render_userdata` renders the
shipped template ``templates/cloud-config.yaml.j2``: the same settings file, the
site's secrets, and ``join.sh``, run once at first boot, which installs the batch
client (unless ``install = false``: a pre-baked image), puts the munge key or the
HTCondor token in place, starts slurmd (a dynamic node, or the declared cloud node
Slurm's power saving asked for) or condor_startd pointed at the head node, and
starts the recontextualization agent with the context's coordinates.

How values travel safely:

* every value goes into the YAML as a quoted string (JSON), and the settings, the
  agent's user data and the script itself go base64-encoded;
* scripts never see a value as code: ``worker.env`` holds shell-quoted assignments,
  and the names, hosts and features that end up in daemon arguments are checked
  against strict patterns first (a value with a newline, a quote or ``$(`` is
  refused here, before anything is launched);
* secrets (the munge key, the HTCondor token, the context's secret) are written
  only to root-owned files of mode 0400/0600, never to commands; the munge key's
  staging copy is shredded once installed. User data is readable by whoever can
  query the instance's metadata: see ``docs/bootstrap.md``.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from elasticsite.clouds.base import CloudError
from elasticsite.plugins import FilePath

__all__ = ["BootstrapConfig", "render_userdata", "userdata_for", "worker_userdata"]

HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?(?::\d{1,5})?$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
FEATURES = re.compile(r"^[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*$")
MAX_USERDATA = 16 * 1024  # EC2's limit (before base64); others allow as much or more
_AGENT_KEYS = ("context_uri", "context_key", "context_secret", "context_ca")


class BootstrapConfig(BaseModel):
    """``[bootstrap]``: how workers boot from a plain image into the site."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    head: str
    """The head node's host name or address (``:port`` allowed): slurmctld for
    ``slurmd --conf-server`` (configless Slurm), the HTCondor central manager."""
    install: bool = True
    """Install the batch client and the agent at boot (false: a pre-baked image)."""
    munge_key_file: FilePath | None = None
    """The site's munge key, read on the manager's host at each launch (Slurm)."""
    condor_token_file: FilePath | None = None
    """An HTCondor IDTOKEN for the workers' startds, read at each launch."""
    agent_package: str = Field("elasticsite", pattern=r"^[A-Za-z0-9_.:/@+=<>-]{1,300}$")
    """What ``pip install`` installs for the agent (a version pin, a wheel URL)."""

    @field_validator("head")
    @classmethod
    def _host(cls, value: str) -> str:
        if not HOST.match(value):
            raise ValueError("must be a host name or address, with an optional :port")
        return value


def worker_userdata(values: Mapping[str, str]) -> str:
    """A cloud-config document writing the worker's settings to a root-only file,
    ``/etc/elasticsite/worker.env`` (``KEY='value'`` lines, shell-quoted), for the
    image's boot scripts to read."""
    body = "\n".join(f"      {line}" for line in _env_lines(values))
    return (
        "#cloud-config\n"
        "write_files:\n"
        "  - path: /etc/elasticsite/worker.env\n"
        "    permissions: '0600'\n"
        "    owner: root:root\n"
        "    content: |\n"
        f"{body}\n"
    )


def _env_lines(values: Mapping[str, str]) -> list[str]:
    lines = []
    for key, value in sorted(values.items()):
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", key):
            raise CloudError(f"user data: {key!r} is not a valid setting name")
        lines.append(f"ELASTICSITE_{key.upper()}={shlex.quote(str(value))}")
    return lines


def _checked(values: Mapping[str, str]) -> None:
    """Refuse what would reach a daemon's arguments unless it is plainly a name."""
    for key, pattern in (
        ("node", NAME), ("worker_id", NAME), ("vm_type", NAME), ("cloud", NAME),
        ("owner", NAME), ("slurm_feature", FEATURES),
    ):  # fmt: skip
        value = values.get(key)
        if value is not None and not pattern.match(value):
            raise CloudError(f"user data: {key} {value!r} is not a plain name; refused")
    cores = values.get("cores")
    if cores is not None and not (cores.isdigit() and 0 < int(cores) < 100_000):
        raise CloudError(f"user data: cores {cores!r} is not a whole number; refused")


def _read_secret(path: str | None, what: str) -> str:
    if not path:
        return ""
    try:
        return base64.b64encode(Path(path).read_bytes()).decode()
    except OSError as exc:
        why = exc.strerror or exc
        raise CloudError(f"bootstrap: cannot read the {what} {path}: {why}") from None


def _template(name: str) -> str:
    return resources.files("elasticsite.clouds").joinpath("templates", name).read_text()


def render_userdata(config: BootstrapConfig, values: Mapping[str, str]) -> str:
    """The cloud-config document that makes a plain image the worker ``values`` describe
    (the manager's per-launch settings: ``worker_id``, ``node``, ``cores``, ``batch``,
    ``vm_type``, the context's ``context_*`` ...)."""
    import jinja2

    _checked(values)
    batch = values.get("batch", "")
    env = {k: v for k, v in values.items() if k not in _AGENT_KEYS}
    env.update(
        head=config.head,
        install="1" if config.install else "0",
        agent_package=config.agent_package,
        slurm_features=",".join(
            f for f in (values.get("slurm_feature", ""), values.get("vm_type", "")) if f
        ),
    )
    secrets = {
        "munge_key": _read_secret(config.munge_key_file, "munge key") if batch == "slurm" else "",
        "condor_token": (
            _read_secret(config.condor_token_file, "HTCondor token") if batch == "htcondor" else ""
        ),
    }
    if batch == "slurm" and not secrets["munge_key"]:
        raise CloudError("bootstrap: a Slurm worker needs munge_key_file")
    agent = {k: values[k] for k in _AGENT_KEYS if values.get(k)}
    jinja = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    jinja.filters["yaml"] = lambda v: json.dumps(str(v))  # JSON strings are YAML scalars
    jinja.filters["b64"] = lambda v: base64.b64encode(str(v).encode()).decode()
    document = jinja.from_string(_template("cloud-config.yaml.j2")).render(
        worker=values.get("worker_id", ""),
        env="\n".join(_env_lines(env)) + "\n",
        secrets=secrets,
        agent=json.dumps(agent, sort_keys=True) if agent else "",
        join_script=_template("join.sh"),
    )
    if len(document.encode()) > MAX_USERDATA:
        raise CloudError(f"bootstrap: user data is {len(document.encode())} bytes, over 16 KiB")
    return document


def userdata_for(config: BootstrapConfig | None, values: Mapping[str, str]) -> str:
    """The user data of one launch: bootstrapped if the site configures it."""
    return worker_userdata(values) if config is None else render_userdata(config, values)
