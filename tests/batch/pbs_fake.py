"""A stateful stand-in for a PBS server, answering the commands :class:`PbsBatch` runs.

No PBS server can run on this machine (no Debian package, no container runtime), so
the contract suite drives :class:`FakePbs` instead. Provenance of what it prints:

- OpenPBS ``qstat -f -F json`` and ``pbsnodes -a -F json``: the attribute names, value
  types and layout of the recorded outputs in ``fixtures/pbs/openpbs-20``,
  ``openpbs-22`` and ``pbspro-2022`` (``timestamp``/``pbs_version``/``pbs_server``
  header, no ``Jobs`` key on an empty server, ``Resource_List`` with ``ncpus``/
  ``select``/``walltime``, times as ``"Wed Apr 14 23:34:17 2021"``, node ``state``
  words, ``resources_available``/``resources_assigned``, ``jobs`` lists).
- Torque ``qstat -f -x`` and ``pbsnodes -x``: the element names of
  ``fixtures/pbs/torque-4`` and ``torque-6`` (epoch times, ``nodes=1:ppn=N``,
  ``<jobs>0/ID, 1/ID</jobs>``, ``<status>rectime=...</status>``, ``<note>``); an empty
  server prints nothing, as Torque's ``qstat -x`` does.
- Error messages (``Unknown Job Id``, ``Unknown node``) follow the recorded
  ``fixtures/pbs/torque-6/pbsnodes-x-unknown-node.txt`` and the PBS man pages.
- Finished jobs as ``fixtures/pbs/openpbs-22/qstat-f-F-json-finished.json`` shows one
  (state ``F``, ``substate`` 92, ``Exit_status``, ``obittime``, ``run_count``) and as
  ``torque-6/qstat-f-x.xml`` does (state ``C``, ``exit_status``, ``comp_time``,
  ``start_count``): OpenPBS lists them only for ``qstat -x`` (job history on), Torque
  in every ``qstat -x`` (its XML flag; ``keep_completed`` set). ``qdel`` of a job ends
  it in substate 91 on OpenPBS (a running one with exit status 256 + SIGTERM) and
  without an exit status on Torque if it never ran.

Its scheduler is deliberately simple: after every change it starts queued jobs in
priority order (server order among equals) on the first up, non-offline node with
enough free cores.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from elasticsite.batch.command import CommandError, CommandResult

SERVER = "pbs-fake"
_COMMANDS = frozenset(
    (
        "qstat",
        "pbsnodes",
        "qmgr",
        "qsub",
        "qalter",
        "qorder",
        "qrerun",
        "qmove",
        "qhold",
        "qrls",
        "qdel",
    )
)
"""The commands the fake answers, each by its method ``_<command>``."""


@dataclass
class FakeJob:
    id: str
    name: str
    ncpus: int
    walltime: str
    priority: int
    qtime: float
    queue: str
    script: str
    state: str = "Q"
    node: str | None = None
    stime: float | None = None
    run_count: int = 0
    exit_status: int | None = None
    substate: int | None = None
    ended: float | None = None


@dataclass
class FakeNode:
    name: str
    ncpus: int
    up: bool = False
    offline: bool = False
    comment: str = ""
    jobs: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


class FakePbs:
    """A PBS server in memory; call it as a :data:`~elasticsite.batch.command.Runner`."""

    def __init__(self, flavour: str = "openpbs", start: float = 1_700_000_000.0) -> None:
        self.flavour = flavour
        self.now = start
        self.jobs: dict[str, FakeJob] = {}
        self.nodes: dict[str, FakeNode] = {}
        self.next_id = 100
        self.calls: list[list[str]] = []

    # -- test hooks -----------------------------------------------------------------------

    def mom_reports(self, name: str) -> None:
        """The node's MoM comes up and talks to the server."""
        self.nodes[name].up = True
        self._schedule()

    def job_ends(self, job_id: str, exit_status: int) -> None:
        """A running job's script ends with ``exit_status`` (256 + N: killed by signal N;
        negative: one of PBS's JOB_EXEC codes)."""
        job = self._job(job_id, "test")
        assert job.state == "R", job
        self._end(job, exit_status, 93 if exit_status else 92)
        self._schedule()

    def _end(self, job: FakeJob, exit_status: int | None, substate: int) -> None:
        if job.node is not None:
            self.nodes[job.node].jobs.remove(job.id)
        job.state = "F" if self.flavour == "openpbs" else "C"
        job.exit_status, job.substate, job.ended = exit_status, substate, self.now

    # -- the Runner -----------------------------------------------------------------------

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        args = [str(a) for a in argv]
        self.calls.append(args)
        self.now += 1.0
        try:
            out = self._dispatch(args)
        except _Fail as fail:
            result = CommandResult(tuple(args), fail.code, "", fail.message + "\n", 0.0)
            raise CommandError(
                args, f"exited with code {fail.code}: {fail.message}", result
            ) from None
        return CommandResult(tuple(args), 0, out, "", 0.0)

    def _dispatch(self, args: list[str]) -> str:
        cmd, rest = args[0], args[1:]
        if cmd == "qstat" and rest == ["--version"]:
            return "pbs_version = 22.05.11\n" if self.flavour == "openpbs" else "Version: 6.1.3\n"
        if cmd == "pbsnodes" and rest in (["-a", "-F", "json"], ["-x"]):
            return self._nodes_json() if self.flavour == "openpbs" else self._nodes_xml()
        if cmd in _COMMANDS:
            run: Callable[[list[str]], str] = getattr(self, f"_{cmd}")
            return run(rest)
        raise _Fail(127, f"{cmd}: command not found")

    # -- state changes ------------------------------------------------------------------

    def _qstat(self, rest: list[str]) -> str:
        listing = ["-f", "-F", "json"] if self.flavour == "openpbs" else ["-f", "-x"]
        if rest == listing:  # the queue: finished jobs only in Torque's (keep_completed)
            shown = [j for j in self.jobs.values() if j.state != "F"]
        else:
            assert rest[:-1] == ([*listing, "-x"] if self.flavour == "openpbs" else listing), rest
            shown = [self._job(rest[-1], "qstat")]
        return self._qstat_json(shown) if self.flavour == "openpbs" else self._qstat_xml(shown)

    def _qdel(self, rest: list[str]) -> str:
        job = self._job(rest[0], "qdel")
        if job.state in ("F", "C"):
            raise _Fail(35, f"qdel: Job has finished {job.id}")
        self._end(job, 271 if job.state == "R" else None, 91)
        self._schedule()
        return ""

    def _job(self, job_id: str, tool: str) -> FakeJob:
        for job in self.jobs.values():
            if job_id in (job.id, job.id.split(".")[0]):
                return job
        raise _Fail(153, f"{tool}: Unknown Job Id {job_id}.{SERVER}")

    def _node(self, name: str) -> FakeNode:
        if name not in self.nodes:
            raise _Fail(1, f"pbsnodes: Unknown node  {name}")
        return self.nodes[name]

    def _pbsnodes(self, rest: list[str]) -> str:
        flag = rest[0]
        if flag == "-o":
            note_flag = "-C" if self.flavour == "openpbs" else "-N"
            assert rest[1] == note_flag, rest
            node = self._node(rest[3])
            node.offline, node.comment = True, rest[2]
        elif flag == ("-r" if self.flavour == "openpbs" else "-c"):
            node = self._node(rest[1])
            node.offline, node.comment = False, ""
            self._schedule()
        else:
            raise _Fail(2, f"pbsnodes: unexpected options {shlex.join(rest)}")
        return ""

    def _qmgr(self, rest: list[str]) -> str:
        assert rest[0] == "-c", rest
        words = rest[1].split()
        verb, name = words[0], words[2]
        if verb == "create":
            if name in self.nodes:
                raise _Fail(1, f"qmgr obj={name} svr=default: Object already exists")
            key, _, value = words[3].partition("=")
            expected = "resources_available.ncpus" if self.flavour == "openpbs" else "np"
            assert key == expected, words
            self.nodes[name] = FakeNode(name, int(value))
        elif verb == "set":
            self._node(name).labels.append(" ".join(words[3:]))
        elif verb == "delete":
            if name not in self.nodes:
                raise _Fail(1, f"qmgr obj={name} svr=default: Unknown node")
            if self.nodes[name].jobs:
                raise _Fail(1, f"qmgr obj={name} svr=default: Cannot delete busy object")
            del self.nodes[name]
        return ""

    def _qsub(self, rest: list[str]) -> str:
        *opts, script_path = rest
        script = Path(script_path).read_text()  # qsub reads the script at submission
        values: dict[str, list[str]] = {}
        for flag, value in zip(opts[::2], opts[1::2], strict=True):
            values.setdefault(flag, []).append(value)
        shape, walltime = values["-l"]
        if self.flavour == "openpbs":
            assert shape.startswith("select=1:ncpus="), shape
        else:
            assert shape.startswith("nodes=1:ppn="), shape
        job_id = f"{self.next_id}.{SERVER}"
        self.next_id += 1
        self.jobs[job_id] = FakeJob(
            id=job_id,
            name=values["-N"][0],
            ncpus=int(shape.rsplit("=", 1)[1]),
            walltime=walltime.split("=", 1)[1],
            priority=int(values.get("-p", ["0"])[0]),
            qtime=self.now,
            queue=values.get("-q", ["workq"])[0],
            script=script,
        )
        self._schedule()
        return job_id + "\n"

    def _qalter(self, rest: list[str]) -> str:
        assert rest[0] == "-p", rest
        job = self._job(rest[2], "qalter")
        job.priority = int(rest[1])
        self._schedule()
        return ""

    def _qorder(self, rest: list[str]) -> str:
        first, second = self._job(rest[0], "qorder"), self._job(rest[1], "qorder")
        items = list(self.jobs.items())
        i = next(n for n, (k, _) in enumerate(items) if k == first.id)
        j = next(n for n, (k, _) in enumerate(items) if k == second.id)
        items[i], items[j] = items[j], items[i]
        self.jobs = dict(items)
        return ""

    def _qrerun(self, rest: list[str]) -> str:
        job = self._job(rest[0], "qrerun")
        if job.state != "R":
            raise _Fail(168, f"qrerun: Request invalid for state of job {job.id}")
        assert job.node is not None
        self.nodes[job.node].jobs.remove(job.id)
        job.state, job.node, job.stime = "Q", None, None
        self._schedule()
        return ""

    def _qhold(self, rest: list[str]) -> str:
        job = self._job(rest[0], "qhold")
        if job.state not in ("Q", "H"):
            raise _Fail(168, f"qhold: Request invalid for state of job {job.id}")
        job.state = "H"
        return ""

    def _qrls(self, rest: list[str]) -> str:
        job = self._job(rest[0], "qrls")
        if job.state != "H":
            raise _Fail(168, f"qrls: Request invalid for state of job {job.id}")
        job.state = "Q"
        self._schedule()
        return ""

    def _qmove(self, rest: list[str]) -> str:
        destination, job = rest[0], self._job(rest[1], "qmove")
        if job.state != "Q":
            raise _Fail(168, f"qmove: Request invalid for state of job {job.id}")
        job.queue = destination
        return ""

    def _schedule(self) -> None:
        queued = sorted(
            (j for j in self.jobs.values() if j.state == "Q"), key=lambda j: -j.priority
        )
        for job in queued:
            for node in self.nodes.values():
                used = sum(self.jobs[i].ncpus for i in node.jobs)
                if node.up and not node.offline and node.ncpus - used >= job.ncpus:
                    job.state, job.node, job.stime = "R", node.name, self.now
                    job.run_count += 1
                    node.jobs.append(job.id)
                    break

    # -- rendering ----------------------------------------------------------------------

    @staticmethod
    def _ctime(epoch: float) -> str:
        return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(epoch))

    def _header(self) -> dict[str, object]:
        return {"timestamp": int(self.now), "pbs_version": "22.05.11", "pbs_server": SERVER}

    def _qstat_json(self, shown: list[FakeJob]) -> str:
        data = self._header()
        jobs = {}
        for job in shown:
            attrs: dict[str, object] = {
                "Job_Name": job.name,
                "Job_Owner": f"pbsuser@{SERVER}",
                "job_state": job.state,
                "queue": job.queue,
                "server": SERVER,
                "Checkpoint": "u",
                "ctime": self._ctime(job.qtime),
                "Priority": job.priority,
                "qtime": self._ctime(job.qtime),
                "Rerunable": "True",
                "Resource_List": {
                    "ncpus": job.ncpus,
                    "nodect": 1,
                    "place": "pack",
                    "select": f"1:ncpus={job.ncpus}",
                    "walltime": job.walltime,
                },
                "substate": job.substate or (42 if job.state == "R" else 10),
                "project": "_pbs_project_default",
                "Submit_Host": SERVER,
                "Output_Path": f"{SERVER}:/home/pbsuser/{job.name}.o{job.id.split('.')[0]}",
                "Error_Path": f"{SERVER}:/home/pbsuser/{job.name}.e{job.id.split('.')[0]}",
                "Join_Path": "n",
            }
            if job.run_count:
                attrs["run_count"] = job.run_count
            if job.state == "F":
                attrs["group_list"] = "pbsuser"
                attrs["obittime"] = self._ctime(job.ended or self.now)
                if job.exit_status is not None:
                    attrs["Exit_status"] = job.exit_status
            if job.node is not None and job.stime is not None:
                attrs["exec_host"] = f"{job.node}/0*{job.ncpus}"
                attrs["exec_vnode"] = f"({job.node}:ncpus={job.ncpus})"
                attrs["stime"] = self._ctime(job.stime)
            jobs[job.id] = attrs
        if jobs:
            data["Jobs"] = jobs
        return json.dumps(data, indent=4) + "\n"

    def _qstat_xml(self, shown: list[FakeJob]) -> str:
        if not shown:
            return ""
        parts = ["<Data>"]
        for job in shown:
            fields = [
                ("Job_Id", job.id),
                ("Job_Name", job.name),
                ("Job_Owner", f"pbsuser@{SERVER}"),
                ("job_state", job.state),
                ("queue", job.queue),
                ("server", SERVER),
                ("ctime", str(int(job.qtime))),
                ("Priority", str(job.priority)),
                ("qtime", str(int(job.qtime))),
                ("Output_Path", f"{SERVER}:/home/pbsuser/{job.name}.o{job.id.split('.')[0]}"),
                ("Error_Path", f"{SERVER}:/home/pbsuser/{job.name}.e{job.id.split('.')[0]}"),
                ("Join_Path", "n"),
                ("egroup", "pbsuser"),
            ]
            if job.node is not None and job.stime is not None:
                cores = f"0-{job.ncpus - 1}" if job.ncpus > 1 else "0"
                fields += [("exec_host", f"{job.node}/{cores}")]
                fields += [("start_time", str(int(job.stime)))]
            if job.run_count:
                fields += [("start_count", str(job.run_count))]
            if job.state == "C":
                if job.exit_status is not None:
                    fields += [("exit_status", str(job.exit_status))]
                fields += [("comp_time", str(int(job.ended or self.now)))]
            body = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields)
            resources = (
                f"<Resource_List><nodect>1</nodect><nodes>1:ppn={job.ncpus}</nodes>"
                f"<walltime>{job.walltime}</walltime></Resource_List>"
            )
            parts.append(f"<Job>{body}{resources}<euser>pbsuser</euser></Job>")
        parts.append("</Data>")
        return "".join(parts) + "\n"

    def _state_words(self, node: FakeNode) -> list[str]:
        if not node.up:
            return ["state-unknown", "down", *(["offline"] if node.offline else [])]
        if node.offline:
            return ["offline"]
        used = sum(self.jobs[i].ncpus for i in node.jobs)
        return ["job-busy"] if used >= node.ncpus else ["free"]

    def _nodes_json(self) -> str:
        data = self._header()
        nodes = {}
        for node in self.nodes.values():
            used = sum(self.jobs[i].ncpus for i in node.jobs)
            attrs: dict[str, object] = {
                "Mom": node.name,
                "ntype": "PBS",
                "state": ",".join(self._state_words(node)),
                "pcpus": node.ncpus,
                "resources_available": {
                    "host": node.name,
                    "ncpus": node.ncpus,
                    "vnode": node.name,
                },
                "resources_assigned": {"ncpus": used} if used else {},
                "resv_enable": "True",
                "sharing": "default_shared",
                "last_state_change_time": int(self.now),
            }
            if node.jobs:
                attrs["jobs"] = list(node.jobs)
            if node.comment:
                attrs["comment"] = node.comment
            nodes[node.name] = attrs
        data["nodes"] = nodes
        return json.dumps(data, indent=4) + "\n"

    def _nodes_xml(self) -> str:
        parts = ["<Data>"]
        for node in self.nodes.values():
            words = self._state_words(node)
            state = ",".join("job-exclusive" if w == "job-busy" else w for w in words)
            state = state.replace("state-unknown,", "")
            fields = [("name", node.name), ("state", state), ("np", str(node.ncpus))]
            fields.append(("ntype", "cluster"))
            slots, index = [], 0
            for job_id in node.jobs:
                for _ in range(self.jobs[job_id].ncpus):
                    slots.append(f"{index}/{job_id}")
                    index += 1
            if slots:
                fields.append(("jobs", ", ".join(slots)))
            if node.up:
                fields.append(("status", f"rectime={int(self.now)},state=free,ncpus={node.ncpus}"))
            if node.comment:
                fields.append(("note", node.comment))
            parts.append("<Node>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields))
            parts.append("</Node>")
        parts.append("</Data>")
        return "".join(parts) + "\n"


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
