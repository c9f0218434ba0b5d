"""Staging probes: time a real transfer from each repository and record its seconds per byte.

A probe moves the configured number of bytes from one repository, the way input would
be staged, and records one ``probe`` observation: the seconds it took divided by the
bytes moved (``value``), the bytes (``nbytes``) and the repository. The staging bounds
forecast these series (Network Weather Service style), so probes should be as large as
real transfers allow: small probes mispredict bulk transfers.

Two kinds of probe, as the ``[[advisor.repositories]]`` entry says:

- ``url``: an HTTP(S) GET with ``Range: bytes=0-(N-1)``; the body is streamed and
  counted, and the transfer stops after N bytes (a server that ignores the range is
  read for its first N bytes). A body shorter than N bytes is a failure. Redirects are
  followed, certificates verified, and the time includes connecting, as a real
  transfer's would.
- ``command``: an argument list run without a shell, its standard input empty and its
  output discarded, with ``ELASTICSITE_PROBE_REPOSITORY``, ``ELASTICSITE_PROBE_BYTES``
  (and ``ELASTICSITE_PROBE_URL`` when the repository has a URL) in its environment;
  exit status 0 means it moved N bytes. It is killed, with its process group, at the
  repository's timeout.

A probe that fails is logged and recorded as a :class:`ProbeFailure` (never as an
observation) and the loop goes on. Probes run one at a time, so they never compete with
each other for the same links.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from elasticsite.config.advisor import AdvisorConfig, AdvisorRepository
from elasticsite.files import StateFileError
from elasticsite.history.observations import PROBE, HistoryStore, Observation, ProbeFailure

__all__ = [
    "ENV_BYTES",
    "ENV_REPOSITORY",
    "ENV_URL",
    "ProbeError",
    "ProbeOutcome",
    "probe",
    "run_probes",
]

log = logging.getLogger(__name__)

ENV_URL = "ELASTICSITE_PROBE_URL"
ENV_BYTES = "ELASTICSITE_PROBE_BYTES"
ENV_REPOSITORY = "ELASTICSITE_PROBE_REPOSITORY"
_CHUNK = 1 << 16
_STDERR_SHOWN = 500
"""Characters of a failed command's stderr kept in its failure."""


class ProbeError(Exception):
    """A probe that moved nothing measurable; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one probe of one repository gave: an observation, or a failure."""

    repository: str
    observation: Observation | None
    failure: ProbeFailure | None
    recorded: bool = True
    """False when the store could not be written (the outcome is only logged)."""


def _http(repo: AdvisorRepository, client: httpx.Client, monotonic: Callable[[], float]) -> float:
    """Seconds to fetch the first ``repo.bytes`` bytes of ``repo.url``."""
    assert repo.url is not None
    wanted = repo.bytes
    headers = {"Range": f"bytes=0-{wanted - 1}", "Accept-Encoding": "identity"}
    start = monotonic()
    got = 0
    try:
        with client.stream("GET", repo.url, headers=headers, timeout=repo.timeout) as response:
            if response.status_code not in (200, 206):
                raise ProbeError(f"{repo.url} answered HTTP {response.status_code}")
            for chunk in response.iter_raw(_CHUNK):
                got += len(chunk)
                if got >= wanted:
                    break
                if monotonic() - start > repo.timeout:
                    raise ProbeError(
                        f"{repo.url}: {got} of {wanted} bytes after {repo.timeout:g} s"
                    )
    except httpx.HTTPError as exc:
        raise ProbeError(f"{repo.url}: {type(exc).__name__}: {exc or 'no detail'}") from exc
    if got < wanted:
        raise ProbeError(f"{repo.url}: the body ended after {got} of {wanted} bytes")
    return monotonic() - start


def _command(repo: AdvisorRepository, monotonic: Callable[[], float]) -> float:
    """Seconds the repository's command took to exit 0."""
    assert repo.command is not None
    argv = [str(a) for a in repo.command]
    env = {**os.environ, ENV_REPOSITORY: repo.name, ENV_BYTES: str(repo.bytes)}
    if repo.url:
        env[ENV_URL] = repo.url
    with tempfile.TemporaryFile() as errors:
        start = monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                env=env,
                start_new_session=True,  # its own process group, killed whole on timeout
            )
        except OSError as exc:
            raise ProbeError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        try:
            code = proc.wait(timeout=repo.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ProbeError(f"{argv[0]} did not finish within {repo.timeout:g} s") from None
        seconds = monotonic() - start
        if code != 0:
            errors.seek(0)
            shown = errors.read()[-_STDERR_SHOWN:].decode("utf-8", "replace").strip()
            raise ProbeError(
                f"{argv[0]} exited with code {code}"
                + (f": {' '.join(shown.split())}" if shown else "")
            )
    return seconds


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def probe(
    repo: AdvisorRepository,
    *,
    resource: str,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    client: httpx.Client | None = None,
) -> Observation:
    """Probe ``repo`` once; the observation it gives (``resource`` is where it was
    staged to). Raises :class:`ProbeError` when it fails. Without ``client`` the
    transfer opens a connection of its own, as a real transfer would."""
    if repo.url is not None and repo.command is None:
        if client is None:
            with httpx.Client(follow_redirects=True) as own:
                seconds = _http(repo, own, monotonic)
        else:
            seconds = _http(repo, client, monotonic)
    else:
        seconds = _command(repo, monotonic)
    return Observation(
        phase=PROBE,
        resource=resource,
        repository=repo.name,
        value=max(seconds, 0.0) / repo.bytes,
        nbytes=repo.bytes,
        at=clock(),
        source="probe",
    )


def run_probes(
    config: AdvisorConfig,
    store: HistoryStore,
    *,
    resource: str,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    once: bool = False,
    rounds: int | None = None,
    report: Callable[[ProbeOutcome], object] | None = None,
) -> list[ProbeOutcome]:
    """Probe every configured repository, each every ``period`` seconds, and record.

    With ``once`` each repository is probed one time and the outcomes are returned;
    otherwise the loop runs until interrupted, or for ``rounds`` probes and returns
    their outcomes. ``report`` is called with each outcome as it comes.
    """
    repos: Sequence[AdvisorRepository] = config.repositories
    if not repos:
        raise ValueError("no [[advisor.repositories]] to probe in the configuration")
    outcomes: list[ProbeOutcome] = []
    due = {repo.name: monotonic() for repo in repos}
    done = 0
    store_failed = False
    while True:
        repo = min(repos, key=lambda r: due[r.name])
        wait = due[repo.name] - monotonic()
        if wait > 0:
            sleep(wait)
        due[repo.name] = max(due[repo.name] + repo.period, monotonic())
        outcome = _probe_and_record(repo, store, resource, clock, monotonic)
        if not outcome.recorded:
            (log.debug if store_failed else log.error)(
                "cannot record the probe of %s in %s", repo.name, store.path
            )
            store_failed = True
        if report is not None:
            report(outcome)
        done += 1
        if once or rounds is not None:
            outcomes.append(outcome)
        if (once and done == len(repos)) or (rounds is not None and done >= rounds):
            return outcomes


def _probe_and_record(
    repo: AdvisorRepository,
    store: HistoryStore,
    resource: str,
    clock: Callable[[], float],
    monotonic: Callable[[], float],
) -> ProbeOutcome:
    observation: Observation | None = None
    failure: ProbeFailure | None = None
    try:
        observation = probe(repo, resource=resource, clock=clock, monotonic=monotonic)
    except ProbeError as exc:
        failure = ProbeFailure(repository=repo.name, at=clock(), error=str(exc))
        log.warning("probe of %s failed: %s", repo.name, exc)
    except Exception as exc:  # a probe never ends the loop: a bug is logged, not raised
        failure = ProbeFailure(
            repository=repo.name, at=clock(), error=f"{type(exc).__name__}: {exc}"
        )
        log.exception("probe of %s failed", repo.name)
    try:
        if observation is not None:
            store.add([observation])
        elif failure is not None:
            store.add_probe_failure(failure)
    except StateFileError as exc:
        log.debug("history store: %s", exc)
        return ProbeOutcome(repo.name, observation, failure, recorded=False)
    return ProbeOutcome(repo.name, observation, failure)
