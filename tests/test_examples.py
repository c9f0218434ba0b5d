"""Every configuration shipped in examples/ is valid as it stands."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticsite.config import load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_configuration_loads(path: Path) -> None:
    config = load_config(path)
    assert config.clouds


def test_the_examples_cover_each_slurm_mode() -> None:
    modes = {load_config(p).batch.mode for p in EXAMPLES if load_config(p).batch.type == "slurm"}
    assert modes == {"external", "power_save"}
