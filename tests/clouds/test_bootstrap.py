"""Worker user data from the shipped templates: what it writes and runs, how secrets
travel, what an attacker's value becomes, and cloud-init's own schema check."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticsite.clouds.base import CloudError
from elasticsite.clouds.bootstrap import BootstrapConfig, render_userdata, userdata_for

ROOT = Path(__file__).resolve().parents[2]
MUNGE_KEY = b"\x00\x01munge-key-bytes\xff" * 32


def values(**over: str) -> dict[str, str]:
    base = {
        "site_id": "uvic", "worker_id": "aws-00007", "node": "aws-00007", "cloud": "aws",
        "cores": "2", "vm_type": "m1.small", "batch": "slurm",
        "slurm_node_mode": "dynamic", "slurm_feature": "elastic",
    }  # fmt: skip
    return {**base, **over}


@pytest.fixture
def config(tmp_path: Path) -> BootstrapConfig:
    key = tmp_path / "munge.key"
    key.write_bytes(MUNGE_KEY)
    token = tmp_path / "condor.token"
    token.write_text("eyJhbGciOiJIUzI1NiJ9.worker-token.sig\n")
    return BootstrapConfig(
        head="head.example.org", munge_key_file=str(key), condor_token_file=str(token)
    )


def files(document: str) -> dict[str, dict[str, Any]]:
    assert document.startswith("#cloud-config\n")
    parsed = yaml.safe_load(document)
    return {f["path"]: f for f in parsed["write_files"]}


def content(entry: dict[str, Any]) -> bytes:
    assert entry["encoding"] == "b64"
    return base64.b64decode(entry["content"])


def env_of(document: str) -> dict[str, str]:
    lines = content(files(document)["/etc/elasticsite/worker.env"]).decode().splitlines()
    out = subprocess.run(
        ["bash", "-c", 'set -a; eval "$(cat)"; env -0'], input="\n".join(lines),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pairs = (item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith("ELASTICSITE_")}


def test_a_slurm_worker_gets_its_settings_the_munge_key_and_the_join_script(
    config: BootstrapConfig,
) -> None:
    document = render_userdata(config, values())
    written = files(document)
    assert set(written) == {
        "/etc/elasticsite/worker.env", "/etc/elasticsite/munge.key",
        "/usr/local/lib/elasticsite/join.sh",
    }  # fmt: skip
    assert content(written["/etc/elasticsite/munge.key"]) == MUNGE_KEY
    assert written["/etc/elasticsite/munge.key"]["permissions"] == "0400"
    assert all(f["owner"] == "root:root" for f in written.values())
    assert written["/etc/elasticsite/worker.env"]["permissions"] == "0600"
    env = env_of(document)
    assert env["ELASTICSITE_HEAD"] == "head.example.org"
    assert env["ELASTICSITE_NODE"] == "aws-00007" and env["ELASTICSITE_INSTALL"] == "1"
    assert env["ELASTICSITE_SLURM_FEATURES"] == "elastic,m1.small"
    script = content(written["/usr/local/lib/elasticsite/join.sh"]).decode()
    assert "slurmd" in script and "--conf-server" in script and "shred -u" in script
    assert yaml.safe_load(document)["runcmd"] == [
        ["/bin/bash", "/usr/local/lib/elasticsite/join.sh"]
    ]
    assert "munge-key" not in document  # only base64, only in its file


def test_an_htcondor_worker_gets_the_pool_token_and_no_munge_key(
    config: BootstrapConfig,
) -> None:
    document = render_userdata(config, values(batch="htcondor"))
    written = files(document)
    assert "/etc/elasticsite/munge.key" not in written
    token = written["/etc/elasticsite/condor.token"]
    assert token["permissions"] == "0600" and b"worker-token" in content(token)
    script = content(written["/usr/local/lib/elasticsite/join.sh"]).decode()
    assert "VMType" in script and "CONDOR_HOST" in script


def test_an_htcondor_worker_for_a_users_share_starts_only_their_jobs(
    config: BootstrapConfig,
) -> None:
    document = render_userdata(config, values(batch="htcondor", owner="ann"))
    assert env_of(document)["ELASTICSITE_OWNER"] == "ann"
    script = content(files(document)["/usr/local/lib/elasticsite/join.sh"]).decode()
    assert "TARGET.Owner =?= MY.ElasticsiteOwner" in script
    assert "SETTABLE_ATTRS_ADMINISTRATOR = ElasticsiteOwner" in script


def test_the_context_reaches_the_agent_in_a_root_only_file_only(
    config: BootstrapConfig,
) -> None:
    context = {"context_uri": "https://broker:8443/ctx/ab12", "context_key": "k1",
               "context_secret": "very-secret-value", "context_ca": "-----BEGIN..."}  # fmt: skip
    document = render_userdata(config, values(**context))
    agent = files(document)["/etc/elasticsite/userdata.json"]
    assert agent["permissions"] == "0600"
    assert json.loads(content(agent)) == context
    assert not any(k.startswith("ELASTICSITE_CONTEXT") for k in env_of(document))


def test_a_pre_baked_image_skips_installing(config: BootstrapConfig) -> None:
    baked = config.model_copy(update={"install": False})
    assert env_of(render_userdata(baked, values()))["ELASTICSITE_INSTALL"] == "0"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("node", "w1\nruncmd: [rm, -rf, /]"),
        ("node", "w1$(reboot)"),
        ("worker_id", "w1'; reboot; '"),
        ("vm_type", "m1.small --conf-server evil"),
        ("owner", 'ann"\nSTART = True'),
        ("slurm_feature", "elastic,x y"),
        ("cores", "2; reboot"),
    ],
)
def test_what_would_reach_a_daemons_arguments_must_be_a_plain_name(
    config: BootstrapConfig, key: str, value: str
) -> None:
    with pytest.raises(CloudError, match="refused"):
        render_userdata(config, values(**{key: value}))


def test_other_values_stay_inert_data(config: BootstrapConfig) -> None:
    hostile = "x'\n$(touch /tmp/pwned) `id` \"; #: {a: b}"
    document = render_userdata(config, values(site_id=hostile))
    assert yaml.safe_load(document)["runcmd"] == [
        ["/bin/bash", "/usr/local/lib/elasticsite/join.sh"]
    ]
    assert env_of(document)["ELASTICSITE_SITE_ID"] == hostile
    assert not Path("/tmp/pwned").exists()


def test_a_slurm_worker_without_a_munge_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CloudError, match="munge_key_file"):
        render_userdata(BootstrapConfig(head="head"), values())
    missing = BootstrapConfig(head="head", munge_key_file=str(tmp_path / "nope"))
    with pytest.raises(CloudError, match="cannot read the munge key"):
        render_userdata(missing, values())


def test_without_bootstrap_the_plain_settings_file_is_kept() -> None:
    document = userdata_for(None, {"node": "w1"})
    assert "ELASTICSITE_NODE=w1" in document and "join.sh" not in document


def test_the_bootstrap_section_is_checked_when_the_site_file_is_read() -> None:
    from elasticsite.config import ConfigError, parse_config

    site = {"clouds": [{"name": "c"}], "bootstrap": {"head": "head.example.org"}}
    assert parse_config(site).bootstrap == BootstrapConfig(head="head.example.org")
    with pytest.raises(ConfigError, match=r"bootstrap\.head"):
        parse_config({**site, "bootstrap": {"head": "head; reboot"}})


def _schema() -> dict[str, Any] | None:
    try:
        out = subprocess.run(
            ["bash", str(ROOT / "scripts" / "cloud-init-schema.sh")],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout.strip()  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return None
    path = ROOT / out
    return json.loads(path.read_text()) if path.is_file() else None


@pytest.mark.parametrize("batch", ["slurm", "htcondor"])
def test_every_template_passes_cloud_inits_own_schema(config: BootstrapConfig, batch: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = _schema()
    if schema is None:
        pytest.skip("cloud-init's schema unavailable (scripts/cloud-init-schema.sh failed)")
    context = {"context_uri": "https://b/ctx/1", "context_key": "k", "context_secret": "s"}
    for document in (
        render_userdata(config, values(batch=batch)),
        render_userdata(config, values(batch=batch, **context)),
        userdata_for(None, values(batch=batch)),
    ):
        errors = list(jsonschema.Draft4Validator(schema).iter_errors(yaml.safe_load(document)))
        assert not errors, [e.message for e in errors]
