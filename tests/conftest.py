"""Fixtures for tests anywhere in the tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing

import pytest
from tests.clouds.ec2_server import FaultyEc2, moto_server


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
