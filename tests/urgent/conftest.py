"""The urgent services served for a test: a real server on 127.0.0.1 (see test_routes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.urgent.test_routes import Site


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The urgent services of a fresh site, stopped at teardown."""
    s = Site(tmp_path)
    yield s
    s.stop()
