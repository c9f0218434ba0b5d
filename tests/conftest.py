"""Fixtures for tests anywhere in the tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from tests.clouds.ec2_server import FaultyEc2, moto_server

SERIAL_PATHS = Path(__file__).with_name("serial-paths.txt")


def serial_paths() -> list[Path]:
    """Where tests marked ``serial`` may live (``tests/serial-paths.txt``)."""
    lines = (line.split("#")[0].strip() for line in SERIAL_PATHS.read_text().splitlines())
    return [SERIAL_PATHS.parent.parent / line for line in lines if line]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    allowed = serial_paths()
    astray = sorted(
        item.nodeid
        for item in items
        if item.get_closest_marker("serial") is not None
        and not any(item.path == p or p in item.path.parents for p in allowed)
    )
    if astray:
        raise pytest.UsageError(
            f"tests marked serial outside {SERIAL_PATHS.name}'s paths, which scripts/test.sh"
            f" would run in no part: {astray}"
        )


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created readable by everyone unless asked."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's EC2 server on 127.0.0.1, one for the module's tests (each site tags its own
    instances); a module using it skips without moto."""
    with moto_server() as url:
        yield url


@pytest.fixture
def proxy(endpoint: str) -> Iterator[FaultyEc2]:
    """A proxy in front of ``endpoint`` that answers the actions a test names with EC2's
    errors, or holds them."""
    with closing(FaultyEc2(endpoint)) as faulty:
        yield faulty
