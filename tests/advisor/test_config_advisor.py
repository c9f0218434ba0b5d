"""The ``[advisor]`` section of a site file: strict, one error line per bad field."""

from __future__ import annotations

from typing import Any

import pytest

from elasticsite.advisor.rank import BATCH_POLICIES as RANKED_BATCH
from elasticsite.advisor.rank import CLOUD_POLICIES as RANKED_CLOUD
from elasticsite.advisor.rank import LEAST_DISRUPTIVE
from elasticsite.config import ConfigError, parse_config
from elasticsite.config.advisor import BATCH_POLICIES, CLOUD_POLICIES


def load(advisor: dict[str, Any]) -> Any:
    return parse_config({"clouds": [{"name": "local"}], "advisor": advisor}, "site.toml").advisor


def refused(advisor: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(advisor)
    return str(caught.value).splitlines()


def test_a_site_without_the_section_records_history_and_ranks_nothing() -> None:
    advisor = parse_config({"clouds": [{"name": "local"}]}).advisor
    assert advisor.record is True
    assert advisor.quantiles == [0.5, 0.75, 0.9, 0.95, 0.99]
    assert (advisor.confidence, advisor.threshold, advisor.overlap_input) == (0.95, 0.5, True)
    assert advisor.resources == [] and advisor.repositories == []
    assert advisor.size_classes is None


def test_a_full_section() -> None:
    advisor = load(
        {
            "quantiles": [0.99, 0.5, 0.9],
            "threshold": 0.6,
            "size_classes": [1, 4, 16],
            "resources": [
                {"name": "hpc", "nodes": [16, 64], "policies": ["default", "preemption"],
                 "app": "flash"},
                {"name": "ec2", "kind": "cloud", "nodes": [8], "policies": ["qos", "migration"]},
            ],
            "repositories": [
                {"name": "ucar", "url": "https://data.ucar.edu/run/input.nc", "bytes": 1 << 28},
                {"name": "iu", "command": ["globus-url-copy", "-p", "4"], "period": 300},
            ],
            "input_bytes": 3_900_000_000,
            "output_bytes": 3_900_000_000,
            "output_repository": "iu",
        }
    )  # fmt: skip
    assert advisor.quantiles == [0.5, 0.9, 0.99]  # sorted
    assert [r.kind for r in advisor.resources] == ["batch", "cloud"]
    assert advisor.repository("iu").command == ["globus-url-copy", "-p", "4"]
    assert advisor.repository("ucar").period == 600.0


def test_every_bad_field_is_named_on_its_own_line() -> None:
    assert refused(
        {
            "quantiles": [0.5, 1.0],
            "confidence": 1,
            "threshold": -0.1,
            "size_classes": [4, 2],
            "resources": [{"name": "hpc", "nodes": [0]}],
            "repositories": [{"name": "r", "url": "ftp://mirror/x", "bytes": 0}],
            "colour": "blue",
        }
    ) == [
        "site.toml: advisor.quantiles: each quantile must be strictly between 0 and 1 (got [1.0])",
        "site.toml: advisor.confidence: Input should be less than 1",
        "site.toml: advisor.threshold: Input should be greater than or equal to 0 (got -0.1)",
        "site.toml: advisor.size_classes: must be increasing node counts >= 1, the upper edge "
        "of each class (got [4, 2])",
        "site.toml: advisor.resources[0].nodes: node counts must be >= 1 (got [0])",
        "site.toml: advisor.repositories[0].url: must be an http:// or https:// URL "
        "(got 'ftp://mirror/x')",
        "site.toml: advisor.repositories[0].bytes: Input should be greater than or equal to 1 "
        "(got 0)",
        "site.toml: advisor.colour: unknown setting (check its spelling and section)",
    ]


@pytest.mark.parametrize(
    ("advisor", "message"),
    [
        (
            {"resources": [{"name": "hpc", "policies": ["qos"]}]},
            "site.toml: advisor.resources[0]: resource hpc: policies: 'qos' unknown for a batch "
            "resource; choose from default, next_to_run, preemption",
        ),
        (
            {"resources": [{"name": "ec2", "kind": "cloud", "policies": ["next_to_run"]}]},
            "site.toml: advisor.resources[0]: resource ec2: policies: 'next_to_run' unknown for "
            "a cloud resource; choose from default, qos, suspension, migration, preemption",
        ),
        (
            {"resources": [{"name": "a"}, {"name": "a", "kind": "cloud"}]},
            "site.toml: advisor: resources: a named twice; names must be unique",
        ),
        (
            {"repositories": [{"name": "r"}]},
            "site.toml: advisor.repositories[0]: repository r: give exactly one of url and command",
        ),
        (
            {"repositories": [{"name": "r", "url": "https://x.org/f", "command": ["cp"]}]},
            "site.toml: advisor.repositories[0]: repository r: give exactly one of url and command",
        ),
        (
            {"repositories": [{"name": "r", "command": []}]},
            "site.toml: advisor.repositories[0].command: must be a non-empty argument list, the "
            "program first",
        ),
        (
            {"repositories": [{"name": "r", "url": "https://x.org/f"}], "output_repository": "s"},
            "site.toml: advisor: output_repository: 's' is not one of the repositories (r)",
        ),
        (
            {"input_bytes": 10},
            "site.toml: advisor: input_bytes/output_bytes need at least one "
            "[[advisor.repositories]] whose probes bound the staging time",
        ),
        (
            {"resources": [{"name": "bad name"}]},
            "site.toml: advisor.resources[0].name: must be 1-64 letters, digits, '.', '_', ':' "
            "or '-' (got 'bad name')",
        ),
    ],
)
def test_what_is_refused_and_why(advisor: dict[str, Any], message: str) -> None:
    assert refused(advisor) == [message]


def test_the_policies_are_those_the_ranking_knows() -> None:
    assert set(BATCH_POLICIES) == set(RANKED_BATCH)
    assert set(CLOUD_POLICIES) == set(RANKED_CLOUD)
    # Listed least disruptive first, as the ranking orders them.
    for policies in (BATCH_POLICIES, CLOUD_POLICIES):
        assert list(policies) == sorted(policies, key=LEAST_DISRUPTIVE.index)
