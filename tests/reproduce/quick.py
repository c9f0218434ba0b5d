"""What the paper modules' tests share: the quick reproduction, computed once per
module; the verdict each claim must come to, and the tests that check them; and the
``reproduce`` command line."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.cli import run_command

from elasticsite.reproduce import Claim, Reproduction, Verdict


def quick_reproduction(reproduce: Callable[..., Reproduction], **settings: Any) -> Any:
    """A module fixture ``quick``: ``reproduce`` run once on its quick variant (with
    ``settings``), in a directory of its own. The module must keep its tests on one
    xdist worker (``pytestmark = pytest.mark.xdist_group(...)``) for the once to hold."""
    name = reproduce.__name__.removeprefix("reproduce_")

    @pytest.fixture(scope="module")
    def quick(tmp_path_factory: pytest.TempPathFactory) -> Reproduction:
        """The paper, reproduced once on its quick variant."""
        return reproduce(tmp_path_factory.mktemp(name), quick=True, **settings)

    return quick


def assert_in_order(repro: Reproduction, keys: tuple[str, ...]) -> None:
    """Every claim of the paper is checked, in the paper's order."""
    assert tuple(c.key for c in repro.claims) == keys


def assert_verdict(
    claim: Claim, *, fails: Mapping[str, str] = {}, unchecked: Mapping[str, str] = {}
) -> None:
    """The claim holds, unless it is listed in ``fails`` (then it must not hold) or in
    ``unchecked`` (then it must not be checkable); a listed claim's note must carry the
    words it is listed with, so a change that makes it hold shows up too."""
    for verdict, listed in ((Verdict.FAILS, fails), (Verdict.UNCHECKED, unchecked)):
        if claim.key in listed:
            assert claim.verdict is verdict, claim
            assert listed[claim.key] in claim.note
            return
    assert claim.verdict is Verdict.HOLDS, claim


def claim_tests(
    keys: tuple[str, ...], *, fails: Mapping[str, str] = {}, unchecked: Mapping[str, str] = {}
) -> tuple[Callable[[Reproduction], None], Callable[[Reproduction, str], None]]:
    """The tests every paper module binds as ``test_every_claim_is_checked_in_order`` and
    ``test_claim``: the paper's claims ``keys`` are all checked, in order, on the module's
    ``quick`` fixture, and each comes to its verdict (see :func:`assert_verdict`)."""

    def in_order(quick: Reproduction) -> None:
        assert_in_order(quick, keys)

    @pytest.mark.parametrize("key", keys)
    def claim(quick: Reproduction, key: str) -> None:
        assert_verdict(quick.claim(key), fails=fails, unchecked=unchecked)

    return in_order, claim


def run_reproduce(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``elasticsite reproduce ARGS`` in ``cwd``, its output captured."""
    return run_command("reproduce", *args, cwd=cwd, env={"COLUMNS": "200"}, timeout=300)
