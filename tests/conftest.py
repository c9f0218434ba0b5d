"""Fixtures for tests anywhere in the tree."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created readable by everyone unless asked."""
    old = os.umask(0o022)
    yield
    os.umask(old)
