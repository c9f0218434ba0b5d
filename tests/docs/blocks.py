"""The shell blocks of the README and docs/*.md, with the promise each one's marker makes.

A fenced block whose language is ``sh`` is a command block. The HTML comment on the
line just above its fence says what it promises, as clauses separated by ``;``::

    <!-- check: exits 0 within 60 s; prints "10 hold" -->

- ``exits N within T s``: run as one ``bash -eo pipefail`` script in a fresh
  directory, it ends with status N before T seconds of wall time have passed;
- ``prints "TEXT"``: its output (stdout and stderr) contains TEXT (repeatable);
- ``writes PATH``: the file (a glob) exists in that directory afterwards (repeatable);
- ``serves until "TEXT"``: its first command is a service; it is started on its own,
  the rest runs once it has printed TEXT, and it must stop cleanly on SIGINT after;
- ``then "COMMAND"``: with ``serves until``, COMMAND runs once the service has stopped
  (whatever happened before: it is how the block's own output is cleaned up) and must
  exit 0, e.g. ``elasticsite down`` for the workers a stopped manager leaves running;
- ``free port 8443``: the port is taken on this machine by nothing in particular, so a
  free one is used instead wherever the block names it (and the broker listens on it);
- ``slow``: the test is marked slow;
- ``syntax only: REASON``: it cannot run here (REASON says why); only its syntax is
  checked: ``bash -n``, every ``elasticsite`` subcommand and option it names, and every
  script of the repository it runs.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*check:(.*?)-->\s*$", re.S)
_EXITS = re.compile(r"^exits (\d+) within (\d+(?:\.\d+)?) s$")
_QUOTED = re.compile(r'^(prints|serves until|then) "(.*)"$')


class MarkerError(ValueError):
    """A marker that does not parse; the message names the block."""


@dataclass(frozen=True)
class Check:
    """What a block's marker promises."""

    exit_status: int = 0
    within: float = 60.0
    prints: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    serves_until: str | None = None
    then: str | None = None
    free_port: int | None = None
    slow: bool = False
    syntax_only: str | None = None  # the reason, when the block cannot run here


@dataclass(frozen=True)
class Block:
    """One shell block: where it is, its text, and its marker (None when it has none)."""

    path: Path
    line: int
    text: str
    check: Check | None
    marker_error: str | None = None
    commands: list[list[str]] = field(default_factory=list, compare=False)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def parse_marker(text: str) -> Check:
    """The promise of one marker's clauses; MarkerError for anything unknown."""
    values: dict[str, object] = {}
    prints: list[str] = []
    writes: list[str] = []
    clauses = [c.strip() for c in text.split(";")]
    for i, clause in enumerate(clauses):
        if not clause:
            continue
        if clause.startswith("syntax only:"):
            # The reason may itself hold ';': it runs to the end of the marker.
            reason = "; ".join([clause.removeprefix("syntax only:"), *clauses[i + 1 :]])
            values["syntax_only"] = reason.strip()
            break
        if m := _EXITS.match(clause):
            values["exit_status"], values["within"] = int(m[1]), float(m[2])
        elif m := _QUOTED.match(clause):
            if m[1] == "prints":
                prints.append(m[2])
            else:
                values[m[1].replace(" ", "_")] = m[2]
        elif clause.startswith("writes "):
            writes.append(clause.removeprefix("writes ").strip())
        elif m := re.match(r"^free port (\d+)$", clause):
            values["free_port"] = int(m[1])
        elif clause == "slow":
            values["slow"] = True
        else:
            raise MarkerError(f"unknown clause {clause!r}")
    if not values.get("syntax_only") and "within" not in values:
        raise MarkerError("a block that runs needs 'exits N within T s'")
    return Check(prints=tuple(prints), writes=tuple(writes), **values)  # type: ignore[arg-type]


def commands(text: str) -> list[list[str]]:
    """The block's commands as argument lists: continuations joined, comments dropped,
    pipelines and ``;``/``&&`` lists split; a line shlex cannot split is kept whole."""
    joined = re.sub(r"\\\n", " ", text)
    out: list[list[str]] = []
    for line in joined.splitlines():
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError:
            out.append([line])
            continue
        current: list[str] = []
        for token in tokens:
            if token and set(token) <= set(";&|"):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(token)
        if current:
            out.append(current)
    return out


def collect(paths: list[Path] = DOCS) -> list[Block]:
    """Every ``sh`` block of the given Markdown files, in order."""
    blocks: list[Block] = []
    for path in paths:
        text = path.read_text()
        for m in _FENCE.finditer(text):
            if m[1] not in ("sh", "bash", "shell"):
                continue
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            check: Check | None = None
            error: str | None = None
            if marker := _MARKER.search(before):
                try:
                    check = parse_marker(marker[1])
                except MarkerError as exc:
                    error = str(exc)
            blocks.append(Block(path, line, m[2], check, error, commands(m[2])))
    return blocks
