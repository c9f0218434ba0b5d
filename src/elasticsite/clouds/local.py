"""The embedded cloud: each instance is a local worker process that boots, joins and leaves.

Its instance registry is its own SQLite file, ``<state_dir>/cloud-<name>.db``: the
provider's API state, independent of the manager, shared with the worker processes
(:mod:`elasticsite.clouds.local_worker`), which record their own progress in it.
Workers run in their own session, so they outlive the process that launched them,
as real instances outlive a crashed manager.

User data carries the broker context's secret: each instance's file is written
atomically and readable by its owner only, as are the registry and the directories.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from elasticsite.boottime import BootPath
from elasticsite.clouds.base import SITE_TAG, CloudError, Instance, InstanceState, LaunchRequest
from elasticsite.clouds.local_capacity import Effect, HostCapacity
from elasticsite.clouds.local_registry import (
    CloudStateError,
    being_started,
    cloud_db,
    process_alive,
    set_instance_state,
    worker_log,
)
from elasticsite.clouds.local_spot import give_notice, pull_plug, reclaims
from elasticsite.files import StateFileError, private_dir, private_opener, write_private

__all__ = [
    "TERMINATED_RETENTION",
    "CloudStateError",
    "LocalCloud",
    "cloud_db",
    "set_instance_state",
]

log = logging.getLogger(__name__)

_STATES = {s.value: s for s in InstanceState}
_LIVE_ROW_STATES = ("pending", "running", "stopping")
TERMINATED_RETENTION = 3600.0
"""Seconds a terminated instance still shows in :meth:`LocalCloud.describe`."""
_LAUNCHING: set[str] = set()
"""Instances this process is starting the worker processes of right now (any
:class:`LocalCloud` object of it)."""


class LocalCloud:
    """A cloud of local worker processes (the embedded site's IaaS).

    ``boot_delay`` (+ uniform ``±boot_jitter``) is how long an instance takes to join
    alone. With ``image_transfer`` (the part of that moving its image, alone, over a
    link the cloud's boots share) or ``parallel_boots`` (boots in progress at once,
    the rest waiting their turn), boots share the cloud's boot path as
    :mod:`elasticsite.boottime` says; each worker replays the registry's boots to know
    when its own ends. ``fail_boot`` is the chance that an instance never joins.
    ``seed`` makes both reproducible. With
    ``capacity``, instances take slots on a fixed set of hosts and urgent launches get
    their policy (:mod:`elasticsite.clouds.local_capacity`).
    """

    def __init__(
        self,
        name: str,
        state_dir: Path | str,
        site_id: str,
        batch_path: Path | str,
        boot_delay: float = 60.0,
        boot_jitter: float = 0.0,
        shutdown_delay: float = 6.0,
        poll_interval: float = 1.0,
        seed: int | None = None,
        fail_boot: float = 0.0,
        fail_launch: float = 0.0,
        api_delay: float = 0.0,
        image_transfer: float = 0.0,
        parallel_boots: int = 0,
        capacity: HostCapacity | None = None,
    ) -> None:
        for label, p in (("fail_boot", fail_boot), ("fail_launch", fail_launch)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{label} must be a probability in [0, 1], got {p}")
        self.boot_path = BootPath(image_transfer, parallel_boots)
        if image_transfer > boot_delay - boot_jitter:
            raise ValueError(
                f"image_transfer ({image_transfer:g} s) must not exceed the shortest boot "
                f"alone, boot_delay - boot_jitter ({boot_delay - boot_jitter:g} s)"
            )
        self.name = name
        self.state_dir = Path(state_dir).absolute()
        self.site_id = site_id
        self.batch_path = Path(batch_path).absolute()
        self.boot_delay = boot_delay
        self.boot_jitter = boot_jitter
        self.shutdown_delay = shutdown_delay
        self.poll_interval = poll_interval
        self.fail_boot = fail_boot
        self.fail_launch = fail_launch
        self.api_delay = api_delay
        self.capacity = capacity
        # Separate streams, so injecting API errors leaves boot times as they were.
        self._api_rng = random.Random(None if seed is None else seed + 1)
        self.db_path = self.state_dir / f"cloud-{name}.db"
        self._rng = random.Random(seed)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for sub in ("", "logs", "userdata", "jobs"):
                private_dir(self.state_dir / sub)
        except StateFileError as exc:
            raise CloudStateError(exc.path, exc.cause) from exc
        with cloud_db(self.db_path):
            pass

    def launch(self, request: LaunchRequest) -> list[Instance]:
        """Start one worker process per name; a name that exists returns its instance.

        With ``fail_launch`` set, that fraction of calls fails as a cloud API error
        would, before anything is created (for exercising retries and backoff); with
        ``api_delay``, every launch and terminate call takes that long, like a slow
        provider.
        """
        if self.api_delay:
            time.sleep(self.api_delay)  # a slow provider API
        if self.fail_launch and self._api_rng.random() < self.fail_launch:
            raise CloudError(f"local cloud {self.name}: launch refused (injected API error)")
        all_tags = request.site_tags(self.name, self.site_id)
        vm_type, names, userdata = request.vm_type, request.names, request.userdata
        now = time.time()
        fresh: list[tuple[str, str]] = []
        boots: list[tuple[float, bool]] = []
        effects: list[Effect] = []
        pids: list[tuple[int, str]] = []
        try:
            with cloud_db(self.db_path) as db:
                for name in names:
                    if db.execute("SELECT 1 FROM instances WHERE name = ?", (name,)).fetchone():
                        continue
                    instance_id = f"i-{os.urandom(8).hex()}"
                    # Pending without a pid while this call starts it: so any describe from
                    # the moment the row is seen.
                    _LAUNCHING.add(instance_id)
                    fresh.append((instance_id, name))
                    delay, never_join = self._draw()
                    rest = max(0.0, delay - self.boot_path.transfer)  # after its image transfer
                    db.execute(
                        "INSERT INTO instances (id, name, site, state, tags, vm_type, cores, "
                        "created_at, updated_at, boot_rest, launcher) "
                        "VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
                        (instance_id, name, all_tags[SITE_TAG], json.dumps(all_tags),
                         vm_type.name, vm_type.cores, now, now, rest, os.getpid()),
                    )  # fmt: skip
                    if self.capacity is not None:  # raises, rolling back, if there is no room
                        effects += self.capacity.reserve(db, instance_id, name, vm_type, all_tags)
                    boots.append((rest, never_join))
            if self.capacity is not None:
                self.capacity.signal(effects)
            for k, (instance_id, name) in enumerate(fresh):
                pid = self._spawn(instance_id, name, vm_type.cores, userdata, *boots[k])
                pids.append((pid, instance_id))
        finally:
            try:
                unstarted = [(time.time(), i) for i, _ in fresh[len(pids) :]]
                with cloud_db(self.db_path) as db:
                    db.executemany("UPDATE instances SET pid = COALESCE(pid, ?) WHERE id = ?", pids)
                    db.executemany(
                        "UPDATE instances SET state = 'error', updated_at = ? WHERE id = ?",
                        unstarted,
                    )
            finally:
                _LAUNCHING.difference_update(i for i, _ in fresh)
        found = {i.name: i for i in self._describe(None, names)}
        return [found[n] for n in names if n in found]

    def _draw(self) -> tuple[float, bool]:
        """One instance's boot alone, and whether it never joins."""
        delay = self.boot_delay
        if self.boot_jitter:
            delay += self._rng.uniform(-self.boot_jitter, self.boot_jitter)
        return max(delay, 0.0), self._rng.random() < self.fail_boot

    def _spawn(
        self, instance_id: str, name: str, cores: int, userdata: Mapping[str, str], rest: float,
        never_join: bool,
    ) -> int:  # fmt: skip
        """Start the worker process of one instance; its pid. Its boot takes ``rest``
        after its turn on the cloud's boot path."""
        userdata_path = self.state_dir / "userdata" / f"{name}.json"
        try:  # it may hold the context's secret: 0600, and never seen half-written
            write_private(userdata_path, json.dumps(dict(userdata), indent=2))
        except OSError as exc:
            msg = f"local cloud {self.name}: cannot write {userdata_path}: {exc}"
            raise CloudError(msg) from exc
        argv = [
            sys.executable, "-m", "elasticsite.clouds.local_worker",
            "--cloud-db", str(self.db_path), "--instance-id", instance_id, "--name", name,
            "--cores", str(cores), "--batch-db", str(self.batch_path),
            "--jobs-dir", str(self.state_dir / "jobs"),
            "--boot-delay", f"{rest:.3f}",
            "--shutdown-delay", f"{self.shutdown_delay:.3f}", "--poll", f"{self.poll_interval:.3f}",
        ]  # fmt: skip
        if self.boot_path.shared:
            argv += ["--image-transfer", f"{self.boot_path.transfer:.3f}",
                     "--parallel-boots", str(self.boot_path.parallel)]  # fmt: skip
        if never_join:
            argv.append("--never-join")
        package_root = str(Path(__file__).resolve().parents[2])  # works installed or not
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env["ELASTICSITE_USERDATA"] = str(userdata_path)
        env["ELASTICSITE_INSTANCE_ID"] = instance_id
        try:
            with open(worker_log(self.state_dir, name), "ab", opener=private_opener) as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            raise CloudError(f"local cloud {self.name}: cannot start worker {name}: {exc}") from exc
        self._children[proc.pid] = proc
        log.info("cloud %s: launched %s (%s, pid %d, boot %.1fs%s%s)", self.name, name,
                 instance_id, proc.pid, rest,
                 f" after its turn on the boot path ({self.boot_path.describe()})"
                 if self.boot_path.shared else "",
                 ", never joins" if never_join else "")  # fmt: skip
        return proc.pid

    def _reap(self, pid: int) -> None:
        """Collect our own dead child so it does not linger as a zombie."""
        child = self._children.get(pid)
        if child is not None:
            if child.poll() is not None:
                del self._children[pid]
            return
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

    def instances(self) -> list[Instance]:
        """Every instance in this cloud's registry, whatever its site."""
        return self._describe(None)

    def describe(self) -> list[Instance]:
        """Every instance tagged with this site, in any state; terminated ones for an hour."""
        self.settle()
        return self._describe(self.site_id)

    def settle(self) -> None:
        """On a finite cloud: resume and restore the instances urgent ones made room with."""
        if self.capacity is None:
            return
        with cloud_db(self.db_path) as db:
            effects = self.capacity.settle(db)
        self.capacity.signal(effects)

    def _describe(self, site: str | None, names: Sequence[str] = ()) -> list[Instance]:
        now = time.time()
        query = "SELECT id, name, state, tags, created_at, pid, launcher FROM instances"
        params: list[str | float] = []
        if site is not None:
            query += " WHERE site = ? AND (state != 'terminated' OR updated_at >= ?)"
            params = [site, now - TERMINATED_RETENTION]
        elif names:
            query += f" WHERE name IN ({', '.join('?' * len(names))})"
            params = list(names)
        with cloud_db(self.db_path, write=False) as db:
            rows = db.execute(query + " ORDER BY created_at, name", params).fetchall()
            notices = reclaims(db)
        result: list[Instance] = []
        fixes: list[tuple[str, str, int | None, str]] = []
        """(new state, id, pid as read, state as read) of the rows this look ends."""
        for instance_id, name, state, tags, created_at, pid, launcher in rows:
            reclaim_at = notices.get(instance_id)
            taken = reclaim_at is not None and reclaim_at <= now
            if taken and state in _LIVE_ROW_STATES:
                pull_plug(pid)
                log.info("cloud %s: %s taken back (spot)", self.name, name)
                fixes.append(("terminated", instance_id, pid, "terminated"))
                state = "terminated"
            elif state in _LIVE_ROW_STATES and not self._live(
                instance_id, pid, launcher, created_at, now
            ):
                fixes.append(("terminated" if state == "stopping" else "error", instance_id, pid,
                              state))  # fmt: skip
                state = fixes[-1][0]
            translated = _STATES.get(state, InstanceState.UNKNOWN)
            if translated is InstanceState.UNKNOWN:
                log.warning("cloud %s: instance %s has unknown state %r", self.name, name, state)
            inst = Instance(instance_id, name, translated, json.loads(tags), created_at)
            inst.reclaim_at = reclaim_at
            inst.reclaimed = taken and translated is InstanceState.TERMINATED
            result.append(inst)
        if fixes:  # only rows as they were read: a launch may have given one its pid since
            by_id = {i.id: i for i in result}
            with cloud_db(self.db_path) as db:
                for state, instance_id, pid, read in fixes:
                    if not db.execute(
                        "UPDATE instances SET state = ?, updated_at = ? WHERE id = ? AND pid IS ? "
                        "AND state IN ('pending', 'running', 'stopping')",
                        (state, now, instance_id, pid),
                    ).rowcount:
                        by_id[instance_id].state = _STATES[read]
        return result

    def _live(
        self, instance_id: str, pid: int | None, launcher: int | None, created_at: float,
        now: float,
    ) -> bool:  # fmt: skip
        """Whether a pending or running instance still has (or will have) its worker. One
        without a pid yet is being started while the launch that created it runs: in
        this process, while that call lasts; in another, while that process lives."""
        if pid is None:
            return being_started(launcher, instance_id in _LAUNCHING, now - created_at)
        self._reap(pid)
        return process_alive(pid, instance_id, launcher)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Ask these instances to shut down (SIGTERM to the worker); unknown ids are ignored."""
        if not instance_ids:
            return
        if self.api_delay:
            time.sleep(self.api_delay)
        marks = ", ".join("?" * len(instance_ids))
        with cloud_db(self.db_path) as db:
            rows = db.execute(
                f"SELECT id, name, pid FROM instances WHERE id IN ({marks}) "
                "AND state != 'terminated'",
                list(instance_ids),
            ).fetchall()
            now = time.time()
            for instance_id, name, pid in rows:
                alive = pid is not None and process_alive(pid, instance_id)
                new_state = "stopping" if alive or pid is None else "terminated"
                db.execute(
                    "UPDATE instances SET state = ?, updated_at = ? WHERE id = ?",
                    (new_state, now, instance_id),
                )
                if alive:
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
                        os.killpg(pid, signal.SIGCONT)  # a suspended worker must hear it
                    log.info("cloud %s: terminating %s (%s)", self.name, name, instance_id)
        self.settle()

    def interrupt(self, instance_id: str, notice: float = 120.0) -> bool:
        """Give notice that the cloud takes ``instance_id`` back in ``notice`` seconds, as
        a provider short of spot capacity does; False for an unknown or ended instance."""
        with cloud_db(self.db_path) as db:
            return give_notice(db, instance_id, time.time() + max(0.0, notice))

    def kill_all(self) -> int:
        """SIGKILL every live worker of this cloud and mark all terminated (tests, cleanup)."""
        with cloud_db(self.db_path) as db:
            rows = db.execute(
                "SELECT id, pid FROM instances WHERE state != 'terminated'"
            ).fetchall()
            killed = 0
            for instance_id, pid in rows:
                if pid is not None and process_alive(pid, instance_id):
                    try:  # the worker leads its own process group
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        continue
                    killed += 1
            db.execute(
                "UPDATE instances SET state = 'terminated', updated_at = ? "
                "WHERE state != 'terminated'",
                (time.time(),),
            )
        for pid in list(self._children):
            try:
                self._children[pid].wait(timeout=5)
            except subprocess.TimeoutExpired:
                continue
            del self._children[pid]
        return killed
