"""Cloud drivers and batch systems found by name: built-ins, unknown names, a third
party's plug-ins published through real entry points, options checked at load."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticsite import plugins
from elasticsite.config import ConfigError, load_config, parse_config
from elasticsite.manager.site import open_site
from elasticsite.policies.base import registry as policy_registry

TOY_MODULE = '''
"""A third party's cloud driver and batch system, kept in memory."""

from pydantic import Field

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import CloudError, Instance, InstanceState
from elasticsite.model import Decision
from elasticsite.plugins import BatchPlugin, CloudPlugin, FilePath, PluginOptions, PolicyPlugin


class ToyOptions(PluginOptions):
    region: str
    quota: int = Field(2, ge=0)


class ToyCloud:
    def __init__(self, options, cloud, site):
        self.name = cloud.name
        self.options, self.cloud, self.site = options, cloud, site
        self.instances = {}

    def launch(self, request):
        tagged = request.site_tags(self.name, self.site.site_id)
        for name in request.names:
            if name not in self.instances:
                if len(self.instances) >= self.options.quota:
                    raise CloudError(f"toy {self.name}: quota of {self.options.quota} reached")
                self.instances[name] = Instance(f"toy-{name}", name, InstanceState.RUNNING, tagged)
        return [self.instances[n] for n in request.names]

    def describe(self):
        return list(self.instances.values())

    def terminate(self, instance_ids):
        for inst in self.instances.values():
            if inst.id in instance_ids:
                inst.state = InstanceState.TERMINATED


class ToyBatchOptions(PluginOptions):
    queue: str = "default"


def make_batch(options, site):
    batch = LocalBatch(site.batch_path)
    batch.toy_options = options
    return batch


class ToyPolicyOptions(PluginOptions):
    price_table: FilePath = "prices.csv"


def toy_decide(snapshot, settings):
    return Decision()


cloud_plugin = CloudPlugin(ToyOptions, ToyCloud)
policy_plugin = PolicyPlugin(toy_decide, ToyPolicyOptions)
batch_plugin = BatchPlugin(ToyBatchOptions, make_batch, modes=("external", "power_save"))
NOT_A_PLUGIN = "a string"
'''

ENTRY_POINTS = """
[elasticsite.clouds]
toy = toy_elastic:cloud_plugin
broken = toy_elastic_missing:plugin
stringly = toy_elastic:NOT_A_PLUGIN

[elasticsite.batch]
toybatch = toy_elastic:batch_plugin

[elasticsite.policies]
toypolicy = toy_elastic:policy_plugin
"""


@pytest.fixture
def third_party(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A directory on sys.path holding ``toy_elastic`` and its dist-info, as pip leaves
    an installed distribution: its entry points are found like any other."""
    root = tmp_path_factory.mktemp("site-packages")
    (root / "toy_elastic.py").write_text(TOY_MODULE)
    info = root / "toy_elastic-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-elastic\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(root))
    yield root
    sys.modules.pop("toy_elastic", None)


@pytest.fixture(autouse=True)
def fresh_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test loads plug-ins afresh, so none outlives the entry points it came from."""
    monkeypatch.setattr(plugins.clouds, "_loaded", {})
    monkeypatch.setattr(plugins.batch_systems, "_loaded", {})
    policy_registry.names()  # the built-ins registered, then kept: they register on import
    monkeypatch.setattr(policy_registry, "_loaded", dict(policy_registry._loaded))


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "site.toml")
    return str(caught.value)


# -- the built-ins ---------------------------------------------------------------------


def test_the_built_ins_are_published_by_name() -> None:
    assert "local" in plugins.clouds.names()
    assert {"local", "slurm", "pbs", "htcondor"} <= set(plugins.batch_systems.names())
    assert isinstance(plugins.clouds.get("local"), plugins.CloudPlugin)
    assert plugins.batch_systems.get("slurm").modes == ("external", "power_save")
    assert plugins.batch_systems.get("local").modes == ("external",)


def test_unknown_names_are_one_line_listing_the_known_ones() -> None:
    assert _error({"clouds": [{"name": "a", "driver": "gce"}]}) == (
        "site.toml: clouds[0].driver: unknown cloud driver 'gce'; "
        "available: ec2, libcloud, local, openstack"
    )
    assert _error({"batch": {"type": "lsf"}, "clouds": [{"name": "a"}]}) == (
        "site.toml: batch.type: unknown batch system 'lsf'; available: htcondor, local, pbs, slurm"
    )
    with pytest.raises(plugins.UnknownPlugin, match="unknown batch system 'lsf'; available: "):
        plugins.batch_systems.get("lsf")


def test_a_plugin_module_is_imported_only_when_a_configuration_names_it(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from elasticsite.config import parse_config
        loaded = lambda: sorted(m for m in sys.modules if m.startswith("elasticsite.batch.")
                                or m.startswith("elasticsite.clouds."))
        print(loaded())
        parse_config({"clouds": [{"name": "a"}]})
        print(loaded())
        parse_config({"batch": {"type": "slurm"}, "clouds": [{"name": "a"}]})
        print(loaded())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    ).stdout.splitlines()
    nothing, embedded, slurm = (eval(line) for line in out)
    assert not any(m.endswith(("plugin", "slurm", "pbs", "htcondor")) for m in nothing), nothing
    assert "elasticsite.clouds.local_plugin" in embedded
    assert "elasticsite.batch.local_plugin" in embedded
    assert "elasticsite.batch.slurm" not in embedded
    assert "elasticsite.batch.slurm" in slurm
    assert "elasticsite.batch.pbs" not in slurm and "elasticsite.batch.htcondor" not in slurm


# -- options, checked when the file is read ----------------------------------------------


def test_bad_options_of_the_built_ins_are_named_at_load(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(
        '[batch]\ntype = "slurm"\n[batch.options]\njobs_from = "xml"\ncolour = "blue"\n'
        '[[clouds]]\nname = "a"\noptions = { fail_boot = 2, seed = 1.5 }\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(site)
    assert str(caught.value).splitlines() == [
        f"{site}: batch.options.jobs_from: Input should be 'format' or 'json' (got 'xml')",
        f"{site}: batch.options.colour: unknown setting (check its spelling and section)",
        f"{site}: clouds[0].options.seed: must be an integer (got 1.5)",
        f"{site}: clouds[0].options.fail_boot: must be a probability in [0, 1] (got 2)",
    ]


def test_each_batch_system_takes_its_own_options() -> None:
    for kind, options, where, message in [
        ("pbs", {"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
        ("pbs", {"flavour": "lsf"}, "flavour", "unknown PBS flavour 'lsf'; valid: openpbs"),
        ("htcondor", {"drain_mode": "slow"}, "drain_mode", "unknown drain_mode 'slow'"),
        ("htcondor", {"default_walltime": "long"}, "default_walltime", "must be seconds"),
        ("slurm", {"node_feature": "a b"}, "node_feature", "must be a plain word"),
        ("slurm", {"demand_partitions": "elastic"}, "demand_partitions", "must be a list"),
        ("slurm", {"default_walltime": float("inf")}, "default_walltime", "must be seconds"),
        ("local", {"scheduler": "lifo"}, "scheduler", "Input should be 'fcfs' or 'easy'"),
    ]:
        error = _error({"batch": {"type": kind, "options": options}, "clouds": [{"name": "a"}]})
        assert error.startswith(f"site.toml: batch.options.{where}: {message}"), error
        assert "\n" not in error
    config = parse_config(
        {
            "batch": {"type": "pbs", "options": {"flavour": "torque", "default_walltime": "7200"}},
            "clouds": [{"name": "a"}],
        }
    )
    assert type(config.batch.options).__name__ == "PbsOptions"
    assert config.batch.options.model_dump()["default_walltime"] == 7200.0


def test_power_save_is_for_the_systems_that_support_it(tmp_path: Path) -> None:
    assert _error({"batch": {"mode": "power_save"}, "clouds": [{"name": "a"}]}) == (
        "site.toml: batch.mode: batch type 'local' supports external only (got 'power_save')"
    )
    config = parse_config(
        {
            "manager": {"state_dir": str(tmp_path)},
            "batch": {"type": "slurm", "mode": "power_save"},
            "clouds": [{"name": "a"}],
        }
    )
    assert config.batch.mode == "power_save"


# -- a third party's plug-ins ------------------------------------------------------------


def test_a_third_party_driver_is_found_through_its_entry_point(
    third_party: Path, tmp_path: Path
) -> None:
    assert "toy" in plugins.clouds.names() and "toybatch" in plugins.batch_systems.names()
    config = parse_config(
        {
            "manager": {"site_id": "toy-site", "state_dir": str(tmp_path / "state")},
            "batch": {"type": "toybatch", "queue": "burst"},
            "clouds": [{"name": "t1", "driver": "toy", "options": {"region": "eu", "quota": 3}}],
        }
    )
    assert config.clouds[0].options.model_dump() == {"region": "eu", "quota": 3}
    assert config.batch.options.model_dump() == {"queue": "burst"}
    site = open_site(config)
    try:
        cloud: Any = site.clouds["t1"]
        assert type(cloud).__name__ == "ToyCloud"
        assert cloud.options is config.clouds[0].options and cloud.cloud is config.clouds[0]
        assert (cloud.site.site_id, cloud.site.state_dir) == ("toy-site", site.state_dir)
        assert cloud.site.batch_path == site.state_dir / "batch.db"
        batch: Any = site.batch
        assert batch.toy_options is config.batch.options
    finally:
        site.store.close()


def test_a_third_party_drivers_options_are_checked_at_load(third_party: Path) -> None:
    error = _error(
        {"clouds": [{"name": "t1", "driver": "toy", "options": {"quota": -1, "regoin": "eu"}}]}
    )
    assert error.splitlines() == [
        "site.toml: clouds[0].options.region: Field required",
        "site.toml: clouds[0].options.quota: Input should be greater than or equal to 0 (got -1)",
        "site.toml: clouds[0].options.regoin: unknown setting (check its spelling and section)",
    ]


def test_a_plugin_that_cannot_load_is_one_line(third_party: Path) -> None:
    assert _error({"clouds": [{"name": "a", "driver": "broken"}]}) == (
        "site.toml: clouds[0].driver: cloud driver 'broken' from toy_elastic_missing:plugin "
        "failed to load: No module named 'toy_elastic_missing'"
    )
    assert _error({"clouds": [{"name": "a", "driver": "stringly"}]}) == (
        "site.toml: clouds[0].driver: cloud driver 'stringly' (toy_elastic:NOT_A_PLUGIN) "
        "is a str, not a CloudPlugin"
    )


def test_a_third_party_batch_system_brings_its_own_modes(third_party: Path, tmp_path: Path) -> None:
    config = parse_config(
        {
            "manager": {"state_dir": str(tmp_path)},
            "batch": {"type": "toybatch", "mode": "power_save"},
            "clouds": [{"name": "a"}],
        }
    )
    assert config.batch.mode == "power_save"


def test_what_differs_per_system_is_the_plugins_to_say(tmp_path: Path) -> None:
    from elasticsite.batch.slurm import SlurmOptions

    slurm = plugins.batch_systems.get("slurm")
    assert slurm.userdata is not None and slurm.ledger is None
    assert slurm.userdata(SlurmOptions(node_feature="burst"), "power_save") == {
        "slurm_node_mode": "cloud",
        "slurm_feature": "burst",
    }
    assert slurm.userdata(SlurmOptions(), "external")["slurm_node_mode"] == "dynamic"
    assert plugins.clouds.get("local").loopback and not plugins.clouds.get("ec2").loopback
    # The embedded system keeps every job: the site lists finished ones through it.
    config = parse_config(
        {"manager": {"state_dir": str(tmp_path / "state")}, "clouds": [{"name": "a"}]}
    )
    site = open_site(config)
    try:
        assert site.userdata() == {"batch": "local"}
        assert site.lists_finished_jobs
        assert site.queue(finished=True).jobs == []
    finally:
        site.store.close()


def test_a_third_party_policys_file_is_found_beside_the_configuration(
    third_party: Path, tmp_path: Path
) -> None:
    site = tmp_path / "etc" / "site.toml"
    site.parent.mkdir()
    clouds = '[[clouds]]\nname = "a"\n'
    site.write_text(f'{clouds}[policy]\nname = "toypolicy"\nprice_table = "prices.csv"\n')
    config = load_config(site)
    assert config.policy.options.price_table == str(site.parent / "prices.csv")
    options = '[policy.options]\nprice_table = "/p.csv"\n'
    site.write_text(f'{clouds}[policy]\nname = "toypolicy"\n{options}')
    assert load_config(site).policy.options.price_table == "/p.csv"
