"""Configuration: the shipped example loads, and every bad field gets one clear error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from elasticsite.config import ConfigError, load_config, parse_config
from elasticsite.policies import options_of
from elasticsite.policies.dedicated import DedicatedOptions
from elasticsite.policies.redirect import RedirectOptions

ROOT = Path(__file__).resolve().parents[1]


def test_example_config_loads() -> None:
    cfg = load_config(ROOT / "examples" / "local.toml")
    assert cfg.policy.name == "bursts"
    assert [c.name for c in cfg.clouds] == ["private", "public"]
    public = cfg.cloud_specs()[1]
    assert public.hourly_billing and public.waste_time == 12.0
    settings = cfg.policy_settings()
    assert settings.stall_timeout == cfg.manager.stall_timeout == 600.0


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "site.toml"
    p.write_text(text)
    return p


def test_bad_field_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, '[[clouds]]\nname = "a"\nmax_instances = -3\n')
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert msg.count("\n") == 0, msg
    assert msg.startswith(f"{p}: clouds[0].max_instances: ")
    assert "-3" in msg


def test_unknown_setting_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, '[manager]\nintervall = 5\n[[clouds]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"manager\.intervall: unknown setting"):
        load_config(p)


def test_unknown_policy_lists_available(tmp_path: Path) -> None:
    p = _write(tmp_path, '[policy]\nname = "magic"\n[[clouds]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"policy\.name: unknown policy 'magic'.*bursts"):
        load_config(p)


def test_every_bad_field_reported_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            {"manager": {"interval": 0}, "clouds": [{"name": "Bad Name", "price_per_hour": -1}]},
            "x.toml",
        )
    lines = str(err.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "manager.interval",
        "clouds[0].name",
        "clouds[0].price_per_hour",
    ]


def test_missing_clouds_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="clouds: Field required"):
        parse_config({}, "empty.toml")
    p = _write(tmp_path, "[manager\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_duplicate_cloud_names_and_inverted_thresholds() -> None:
    with pytest.raises(ConfigError, match="two clouds are named 'a'"):
        parse_config({"clouds": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ConfigError, match="steady_down_factor"):
        parse_config(
            {"policy": {"steady_up_factor": 2, "steady_down_factor": 3}, "clouds": [{"name": "a"}]}
        )


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "7200.0", "0.0"])
def test_interval_is_a_finite_duration_within_an_hour(tmp_path: Path, value: str) -> None:
    p = _write(tmp_path, f'[manager]\ninterval = {value}\n[[clouds]]\nname = "a"\n')
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert msg.count("\n") == 0, msg
    assert msg.startswith(f"{p}: manager.interval: "), msg


@pytest.mark.parametrize(
    "section, field",
    [
        ("manager", "stall_timeout"),
        ("manager", "heartbeat_timeout"),
        ("manager", "retry_backoff"),
        ("manager", "retry_backoff_max"),
        ("manager", "shutdown_timeout"),
        ("policy", "billing_margin"),
        ("clouds", "boot_time"),
        ("clouds", "shutdown_time"),
        ("clouds", "billing_increment"),
    ],
)
def test_every_duration_is_finite_and_bounded(section: str, field: str) -> None:
    for value in (math.inf, math.nan, 1e12):
        data: dict[str, Any] = {"clouds": [{"name": "a"}]}
        if section == "clouds":
            data["clouds"][0][field] = value
            where = f"clouds[0].{field}"
        else:
            data[section] = {field: value}
            where = f"{section}.{field}"
        with pytest.raises(ConfigError) as err:
            parse_config(data, "x.toml")
        assert str(err.value).startswith(f"x.toml: {where}: "), (value, str(err.value))
        assert "\n" not in str(err.value)


def test_spend_cap_must_be_finite() -> None:
    with pytest.raises(ConfigError, match=r"policy\.spend_cap_per_hour: .*finite"):
        parse_config({"policy": {"spend_cap_per_hour": math.inf}, "clouds": [{"name": "a"}]})


def test_cloud_options_are_checked_at_load_with_one_line_per_bad_option(tmp_path: Path) -> None:
    p = _write(
        tmp_path, '[[clouds]]\nname = "a"\noptions = { fail_boot = 2, boot_delay = "soon" }\n'
    )
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value).splitlines() == [
        f"{p}: clouds[0].options.boot_delay: must be a number of seconds in [0, 86400] "
        "(got 'soon')",
        f"{p}: clouds[0].options.fail_boot: must be a probability in [0, 1] (got 2)",
    ]


def test_local_cloud_delays_default_to_the_clouds_estimates() -> None:
    cfg = parse_config(
        {
            "clouds": [
                {"name": "a", "boot_time": 7, "shutdown_time": 2, "options": {"boot_jitter": 1}},
                {"name": "b", "options": {"boot_delay": 0.5}},
            ]
        }
    )
    a, b = (c.options.model_dump() for c in cfg.clouds)
    assert (a["boot_delay"], a["shutdown_delay"], a["boot_jitter"]) == (7.0, 2.0, 1.0)
    assert (b["boot_delay"], b["shutdown_delay"], b["poll_interval"]) == (0.5, 6.0, 1.0)


def test_the_embedded_batch_systems_settings_stay_where_they_were(tmp_path: Path) -> None:
    p = _write(
        tmp_path, '[batch]\ntype = "local"\npath = "jobs.db"\nscheduler = "fcfs"\n'
        '[[clouds]]\nname = "a"\n'
    )  # fmt: skip
    cfg = load_config(p)
    assert cfg.batch.path == "jobs.db"
    assert cfg.batch.options.model_dump() == {"scheduler": "fcfs", "node_partition": ""}
    p = _write(tmp_path, '[batch]\nscheduler = "lifo"\n[[clouds]]\nname = "a"\n')
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value) == f"{p}: batch.scheduler: Input should be 'fcfs' or 'easy' (got 'lifo')"
    with pytest.raises(ConfigError, match=r"scheduler: given both in \[batch\] and in"):
        parse_config(
            {
                "batch": {"scheduler": "easy", "options": {"scheduler": "fcfs"}},
                "clouds": [{"name": "a"}],
            }
        )
    with pytest.raises(ConfigError, match=r"x\.toml: batch\.partiton: unknown setting"):
        parse_config(
            {"batch": {"type": "slurm", "partiton": "x"}, "clouds": [{"name": "a"}]}, "x.toml"
        )


def test_a_redirecting_policy_needs_a_provisioning_one() -> None:
    from elasticsite.config import ConfigError, parse_config

    ok = parse_config({"policy": {"name": "selective", "provision": "bursts"}, **CLOUD})
    own = ok.policy_settings().options
    assert isinstance(own, RedirectOptions)
    assert (own.provision, own.redirect_to) == (
        "bursts",
        "cloud",
    )
    with pytest.raises(ConfigError, match=r"policy.provision: 'naive' redirects"):
        parse_config({"policy": {"name": "selective", "provision": "naive"}, **CLOUD})
    with pytest.raises(ConfigError, match=r"policy.provision: unknown policy"):
        parse_config({"policy": {"name": "naive", "provision": "nope"}, **CLOUD})
    with pytest.raises(ConfigError, match=r"policy.redirect_to"):
        parse_config({"policy": {"redirect_to": "a b"}, **CLOUD})
    with pytest.raises(ConfigError, match="redirected jobs would never run"):
        parse_config({"policy": {"name": "naive"}, "clouds": [{"name": "c"}]})


CLOUD = {"clouds": [{"name": "c"}], "batch": {"node_partition": "cloud"}}


def test_a_cloud_serves_the_jobs_its_selector_names() -> None:
    from elasticsite.config import ConfigError, parse_config

    cfg = parse_config({"clouds": [{"name": "c", "serves": {"partition": ["cloud", "gpu"]}}]})
    (spec,) = cfg.cloud_specs()
    assert spec.serves.matches({"partition": "gpu"}) and not spec.serves.matches({})
    with pytest.raises(ConfigError, match=r"clouds\[0\].serves"):
        parse_config({"clouds": [{"name": "c", "serves": {"Partition": ["x"]}}]})


def test_a_policys_options_may_also_go_in_their_own_table() -> None:
    table = parse_config({"policy": {"name": "dedicated", "options": {"dedicated_workers": 4}},
                          "clouds": [{"name": "a"}]})  # fmt: skip
    assert options_of(table.policy_settings(), DedicatedOptions).dedicated_workers == 4
    with pytest.raises(ConfigError, match=r"dedicated_workers: given both in \[policy\] and"):
        parse_config({"policy": {"dedicated_workers": 1, "options": {"dedicated_workers": 4}},
                      "clouds": [{"name": "a"}]})  # fmt: skip
    with pytest.raises(ConfigError, match=r"policy\.dedicated_workers: .*greater than or equal"):
        parse_config({"policy": {"dedicated_workers": -1}, "clouds": [{"name": "a"}]})
    with pytest.raises(ConfigError, match=r"policy\.burst_factor: unknown setting"):
        parse_config({"policy": {"burst_factor": 2}, "clouds": [{"name": "a"}]})


def test_selective_categories_and_thresholds_are_checked_at_load() -> None:
    policy = {"name": "selective", "params": {
        "selective_categories": {"runtime_cuts": [1800, 7200], "width_cuts": [4]},
        "selective_threshold": [1, 2, 3, 4, 5, 6],
    }}  # fmt: skip
    ok = parse_config({"policy": policy, **CLOUD})
    assert ok.policy_settings().params["selective_threshold"] == [1, 2, 3, 4, 5, 6]
    bad = [
        ({"selective_threshold": [2, 3]}, r"one per category in this order: run<=3600s w<=8, "),
        ({"selective_threshold": 0.5}, r"selective_threshold: give one number >= 1"),
        ({"selective_categories": {"width_cuts": [8, 4]}}, r"width_cuts: cuts must be strictly"),
        ({"selective_categories": {"runtime": [1]}}, r"selective_categories: give a table"),
    ]
    for params, message in bad:
        with pytest.raises(ConfigError, match=r"<config>: policy.params: .*" + message):
            parse_config({"policy": {"name": "selective", "params": params}, **CLOUD})
    # selective_global has one category, whatever the cuts: one threshold in a list
    one = {"name": "selective_global", "params": {"selective_threshold": [2]}}
    assert parse_config({"policy": one, **CLOUD}).policy_settings().params == one["params"]
    two = {"name": "selective_global", "params": {"selective_threshold": [2, 3]}}
    with pytest.raises(ConfigError, match=r"policy.params: .*in this order: any run any w; "):
        parse_config({"policy": two, **CLOUD})


def test_cloud_scheduler_mode_is_refused_on_a_batch_system_without_per_user_nodes() -> None:
    clouds = {"clouds": [{"name": "c"}]}
    for kind in ("local", "slurm", "htcondor"):
        parse_config({"policy": {"name": "cloud_scheduler"}, "batch": {"type": kind}, **clouds})
    with pytest.raises(ConfigError) as err:
        parse_config(
            {"policy": {"name": "cloud_scheduler"}, "batch": {"type": "pbs"}, **clouds}, "s.toml"
        )
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("s.toml: policy.name: 'cloud_scheduler' keeps each VM")
    assert "batch type 'pbs' cannot" in message and "use slurm, htcondor or local" in message


def test_the_currency_is_the_sites_and_usd_by_default() -> None:
    assert parse_config({"clouds": [{"name": "a"}]}).site.currency == "USD"
    cfg = parse_config({"site": {"currency": "EUR"}, "clouds": [{"name": "a"}]})
    assert cfg.site.currency == "EUR"
    for bad in ("dollars", "usd", "", "U$D"):
        with pytest.raises(ConfigError) as err:
            parse_config({"site": {"currency": bad}, "clouds": [{"name": "a"}]}, "x.toml")
        assert str(err.value) == (
            "x.toml: site.currency: must be a three-letter currency code such as USD or EUR "
            f"(got {bad!r})"
        )


def test_a_budget_is_an_amount_per_calendar_period() -> None:
    from elasticsite.spend import Budget

    def budget(value: object) -> Budget | None:
        data = {"policy": {"budget": value}, "clouds": [{"name": "a"}]}
        return parse_config(data, "x.toml").policy_settings().budget

    assert parse_config({"clouds": [{"name": "a"}]}).policy_settings().budget is None
    assert budget({"amount": 500}) == Budget(500.0, "month", 0.0)
    assert budget({"amount": 20, "period": "day", "urgent_extra": 5}) == Budget(20.0, "day", 5.0)
    for value, where, what in [
        ({"amount": 0}, "policy.budget.amount", "greater than 0"),
        ({"amount": math.inf}, "policy.budget.amount", "finite"),
        ({"amount": 5, "period": "year"}, "policy.budget.period", "'day', 'week' or 'month'"),
        ({"amount": 5, "urgent_extra": -1}, "policy.budget.urgent_extra", "(got -1)"),
        ({"period": "day"}, "policy.budget.amount", "Field required"),
        ({"amount": 5, "per": "day"}, "policy.budget.per", "unknown setting"),
        (500, "policy.budget", 'must be a table like { amount = 500, period = "month" }'),
    ]:
        with pytest.raises(ConfigError) as err:
            budget(value)
        assert str(err.value).startswith(f"x.toml: {where}: "), str(err.value)
        assert what in str(err.value) and "\n" not in str(err.value)


def test_every_path_a_site_file_names_is_taken_from_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wherever a command runs, it finds the files its site file names next to it."""
    conf = tmp_path / "etc"
    conf.mkdir()
    p = conf / "site.toml"
    p.write_text(
        '[manager]\nstate_dir = "state"\n'
        '[batch]\ntype = "pbs"\nscript_dir = "scripts"\n'
        '[[clouds]]\nname = "aws"\ndriver = "ec2"\n'
        'options = { image_id = "ami-1", credentials_file = "aws/credentials" }\n'
        '[[clouds]]\nname = "os"\ndriver = "openstack"\n'
        'options = { image = "debian", credentials_file = "/abs/openrc" }\n'
        '[context]\nbroker = "https://head:8443"\ntoken_file = "broker/admin.token"\n'
        'ca = "~/broker.crt"\n'
        '[urgent]\nserver = "https://head:8443"\nkey_file = "urgent/site.key"\n'
        'ca = "urgent/ca.pem"\nsocket = "run/gate.sock"\n'
        '[bootstrap]\nhead = "head"\nmunge_key_file = "munge.key"\n'
    )
    cfg = load_config(p)
    home = Path("~").expanduser()
    assert cfg.state_dir() == conf / "state"
    assert cfg.batch.options.script_dir == str(conf / "scripts")  # type: ignore[attr-defined]
    aws, os_cloud = (c.options for c in cfg.clouds)
    assert aws.credentials_file == str(conf / "aws" / "credentials")  # type: ignore[attr-defined]
    assert os_cloud.credentials_file == "/abs/openrc"  # type: ignore[attr-defined]
    assert cfg.context is not None and cfg.urgent is not None and cfg.bootstrap is not None
    assert (cfg.context.token_file, cfg.context.ca) == (
        str(conf / "broker" / "admin.token"), str(home / "broker.crt")
    )  # fmt: skip
    assert (cfg.urgent.key_file, cfg.urgent.ca, cfg.urgent.socket) == (
        str(conf / "urgent" / "site.key"), str(conf / "urgent" / "ca.pem"),
        str(conf / "run" / "gate.sock"),
    )  # fmt: skip
    assert cfg.bootstrap.munge_key_file == str(conf / "munge.key")
    # The default state directory too, and a file named relative to the command's own
    # directory is still taken from its own.
    (conf / "bare.toml").write_text('[[clouds]]\nname = "local"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config("etc/bare.toml").state_dir() == conf / "elasticsite-state"
