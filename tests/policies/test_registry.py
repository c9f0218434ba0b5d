"""The policy registry: built-ins by name, register(), and plug-ins from real entry points."""

from __future__ import annotations

import sys
import textwrap

import pytest
from pydantic import ValidationError

from elasticsite.model import Cause, Decision, Launch
from elasticsite.plugins import PluginOptions, PolicyPlugin
from elasticsite.policies import (
    ENTRY_POINT_GROUP,
    PolicySettings,
    UnknownPolicy,
    available,
    bursts,
    core_demand,
    dedicated,
    evaluate,
    get,
    on_demand,
    options_of,
    register,
    settings_for,
    steady_stream,
)

from .conftest import jobs, snap

BUILTINS = {
    "bursts": bursts.decide,
    "core_demand": core_demand.decide,
    "dedicated": dedicated.decide,
    "on_demand": on_demand.decide,
    "steady_stream": steady_stream.decide,
}


def test_available_lists_every_builtin_sorted():
    names = available()
    assert set(BUILTINS) <= set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_get_returns_the_builtin_function(name):
    assert get(name).decide is BUILTINS[name]


def test_capabilities_and_options_are_declared_on_the_plugin():
    assert get("cloud_scheduler").typed_nodes and not get("cloud_scheduler").redirects
    assert get("selective").redirects and not get("selective").typed_nodes
    assert not get("bursts").redirects and not get("bursts").typed_nodes
    assert set(get("steady_stream").options.model_fields) == {
        "steady_up_factor",
        "steady_down_factor",
        "steady_min_workers",
    }
    assert set(get("on_demand").options.model_fields) == set()
    assert isinstance(get("bursts"), PolicyPlugin)
    # the dedicated baseline's pool boots before the workload; no other built-in has one
    assert get("dedicated").preboot is not None and get("bursts").preboot is None


def test_settings_for_puts_the_limits_beside_the_policys_validated_options():
    s = settings_for("dedicated", dedicated_workers=3, stall_timeout=99.0, cloud_rule="fastest")
    assert (s.stall_timeout, s.cloud_rule) == (99.0, "fastest")
    assert isinstance(s.options, dedicated.DedicatedOptions)
    assert options_of(s, dedicated.DedicatedOptions).dedicated_workers == 3
    # as in a site file, every built-in's thresholds are taken whatever the policy named
    # (a redirecting policy sizes the cloud's workers with its provision policy) ...
    naive = settings_for("naive", provision="steady_stream", steady_up_factor=9.0)
    assert options_of(naive, steady_stream.SteadyStreamOptions).steady_up_factor == 9.0
    # ... each checked by its own model
    with pytest.raises(ValidationError, match="dedicated_workers"):
        settings_for("on_demand", dedicated_workers=-1)
    with pytest.raises(ValidationError, match="steady_down_factor"):
        settings_for("steady_stream", steady_up_factor=2.0)
    with pytest.raises(ValidationError, match="dedicated_worker\n"):
        settings_for("dedicated", dedicated_worker=1)
    with pytest.raises(UnknownPolicy):
        settings_for("nope")
    # settings without a model's options read as its defaults
    assert options_of(PolicySettings(), dedicated.DedicatedOptions).dedicated_workers == 10
    assert options_of(s, steady_stream.SteadyStreamOptions).steady_min_workers == 1


def test_unknown_policy_names_every_available_one():
    with pytest.raises(UnknownPolicy) as err:
        get("fastest_possible")
    assert str(err.value) == (
        f"unknown policy 'fastest_possible'; available: {', '.join(available())}"
    )
    assert (
        "bursts, cloud_scheduler, core_demand, dedicated, naive, on_demand, selective, "
        "selective_global, shortest_queue, "
        "steady_stream, weighted_queue" in str(err.value)
    )
    assert isinstance(err.value, LookupError)


def test_register_makes_a_policy_available_by_name(clean_registry):
    @register("two_always")
    def two_always(snapshot, settings):
        return Decision(launch=[Launch("a", "small", 2, Cause.BASELINE)])

    assert "two_always" in available()
    assert get("two_always").decide is two_always
    assert evaluate(get("two_always"), snap(), PolicySettings()).launched() == 2
    # Registering the same function again is harmless; another one under that name is not.
    assert register("two_always")(two_always) is two_always
    with pytest.raises(ValueError, match="a policy named 'two_always' is already registered"):
        register("two_always")(lambda snapshot, settings: Decision())


def test_register_refuses_to_shadow_a_builtin(clean_registry):
    with pytest.raises(ValueError, match="'on_demand' is already registered"):
        register("on_demand")(lambda snapshot, settings: Decision())
    assert get("on_demand").decide is on_demand.decide


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch, clean_registry):
    """A real installed distribution publishing policies in the entry-point group."""
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "fair_share_policy.py").write_text(
        textwrap.dedent(
            '''
            from elasticsite.model import Cause, Decision, Launch

            LIMIT = 3

            def decide(snapshot, settings):
                """One worker per queued job, never more than params['limit'] at once."""
                n = min(len(snapshot.queued), settings.params.get("limit", LIMIT))
                if n <= 0:
                    return Decision()
                spec = snapshot.clouds[0]
                return Decision(launch=[Launch(spec.name, spec.default_vm.name, n, Cause.DEMAND)])
            '''
        )
    )
    info = site / "fair_share_policy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fair-share-policy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        "fair_share = fair_share_policy:decide\n"
        "broken = fair_share_missing_module:decide\n"
        "not_callable = fair_share_policy:LIMIT\n"
        "on_demand = fair_share_policy:decide\n"
        "\n[console_scripts]\nunrelated = fair_share_policy:decide\n"
    )
    monkeypatch.syspath_prepend(str(site))  # also invalidates importlib's caches
    yield site
    sys.modules.pop("fair_share_policy", None)


def test_entry_point_policy_is_listed_and_loaded(plugin_dist):
    assert {"fair_share", "broken", "not_callable"} <= set(available())
    assert "unrelated" not in available()
    fn = get("fair_share")
    assert fn.decide is sys.modules["fair_share_policy"].decide
    assert fn.options is PluginOptions and not fn.redirects  # a bare function: none declared
    assert get("fair_share") is fn  # loaded once, then served from the registry
    settings = PolicySettings(params={"limit": 2})
    assert evaluate(fn, snap(jobs(5)), settings) == Decision(
        launch=[Launch("a", "small", 2, Cause.DEMAND)]
    )


def test_entry_point_that_cannot_be_imported_is_reported(plugin_dist):
    with pytest.raises(UnknownPolicy) as err:
        get("broken")
    assert str(err.value) == (
        "policy 'broken' from fair_share_missing_module:decide failed to load: "
        "No module named 'fair_share_missing_module'"
    )
    assert isinstance(err.value.__cause__, ImportError)


def test_entry_point_that_is_not_callable_is_refused(plugin_dist):
    with pytest.raises(UnknownPolicy, match=r"policy 'not_callable' \(fair_share_policy:LIMIT\) "):
        get("not_callable")


def test_builtin_wins_over_a_plugin_of_the_same_name(plugin_dist):
    assert available().count("on_demand") == 1
    assert get("on_demand").decide is on_demand.decide


def test_plugin_disappears_with_its_distribution(plugin_dist, monkeypatch):
    monkeypatch.undo()
    assert "fair_share" not in available()
    with pytest.raises(UnknownPolicy, match="unknown policy 'fair_share'"):
        get("fair_share")


def test_a_published_plugin_declares_its_options_and_capabilities(plugin_dist):
    (plugin_dist / "capped_policy.py").write_text(
        textwrap.dedent(
            """
            from elasticsite.model import Decision
            from elasticsite.plugins import PluginOptions, PolicyPlugin

            class Options(PluginOptions):
                limit: int = 3

            def decide(snapshot, settings):
                return Decision()

            plugin = PolicyPlugin(decide, Options, typed_nodes=True)
            """
        )
    )
    eps = next(plugin_dist.glob("*.dist-info")) / "entry_points.txt"
    eps.write_text(eps.read_text().replace("[console", "capped = capped_policy:plugin\n\n[console"))
    from elasticsite.config import ConfigError, parse_config

    try:
        cfg = parse_config({"policy": {"name": "capped", "limit": 5}, "clouds": [{"name": "a"}]})
        settings = cfg.policy_settings()
        assert get("capped").typed_nodes and settings.options.limit == 5  # type: ignore[attr-defined]
        # its own options and the built-ins' thresholds are checked by their models
        with pytest.raises(ConfigError, match=r"policy\.limit: .*integer"):
            parse_config({"policy": {"name": "capped", "limit": "x"}, "clouds": [{"name": "a"}]})
        with pytest.raises(ConfigError, match=r"policy\.limitt: unknown setting"):
            parse_config({"policy": {"name": "capped", "limitt": 1}, "clouds": [{"name": "a"}]})
        assert (
            parse_config(
                {"policy": {"name": "capped", "bursts_factor": 3}, "clouds": [{"name": "a"}]}
            )
            .policy_settings()
            .options.bursts_factor  # type: ignore[attr-defined]
            == 3
        )
    finally:
        sys.modules.pop("capped_policy", None)
