"""Slurm host lists as the power-saving hooks receive them."""

from __future__ import annotations

import pytest

from elasticsite.batch.hostlist import HostlistError, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        ("cloud1", ["cloud1"]),
        ("cloud[1-3]", ["cloud1", "cloud2", "cloud3"]),
        ("cloud[1-2,7],login", ["cloud1", "cloud2", "cloud7", "login"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("a[1],a1,b", ["a1", "b"]),
        (" gpu[3-4] ", ["gpu3", "gpu4"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand(text) == names


@pytest.mark.parametrize(
    "text", ["cloud[1-", "cloud]1", "cloud[a-b]", "cloud[3-1]", "c[[1]]", "a,,b", "n[0-99999]"]
)
def test_malformed_host_lists_are_refused_with_the_list_named(text: str) -> None:
    with pytest.raises(HostlistError, match="host list"):
        expand(text)
