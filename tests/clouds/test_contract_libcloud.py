"""The generic libcloud driver passes the shared driver contract through libcloud's own
DigitalOcean driver, over HTTP, against a local DigitalOcean API answering with
recorded responses; its errors carry the kind the manager acts on."""

from __future__ import annotations

import itertools
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clouds.contract import CloudContract, CloudHarness
from tests.clouds.libcloud_server import TOKEN, DigitalOceanServer, credentials, digitalocean_server

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudDriver, CloudError, LaunchRequest
from elasticsite.clouds.errors import ErrorKind
from elasticsite.clouds.libcloud_driver import LibcloudCloud, LibcloudOptions
from elasticsite.model import VMType

pytest.importorskip("libcloud")
pytestmark = pytest.mark.xdist_group("libcloud-contract")  # one fake `cloud`

SIZE = VMType("s-1vcpu-1gb", cores=1)
_sites = itertools.count(1)


@pytest.fixture(scope="module")
def cloud() -> Iterator[DigitalOceanServer]:
    with digitalocean_server() as server:
        yield server


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return credentials(tmp_path_factory.mktemp("do"))


def driver(server: DigitalOceanServer, creds: Path, site: str, **options: object) -> LibcloudCloud:
    settings = LibcloudOptions.model_validate(
        {
            "provider": "digitalocean", "image": "debian-12-x64", "location": "ams3",
            "credentials_file": str(creds),
            "driver_args": {"host": "127.0.0.1", "port": server.port, "secure": False},
            **options,
        }
    )  # fmt: skip
    return LibcloudCloud.connect("do", site, settings)


class LibcloudHarness(CloudHarness):
    vm_type = SIZE
    step = 0.05

    def __init__(self, server: DigitalOceanServer, creds: Path, **options: object) -> None:
        self.server, self.creds, self.extra = server, creds, options
        self.site_id = f"site-{next(_sites)}"
        self.driver = driver(server, creds, self.site_id, **options)

    def settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def neighbour(self) -> CloudDriver:
        return driver(self.server, self.creds, "another-site", **self.extra)

    def refusing(self) -> tuple[CloudDriver, list[str]]:
        self.server.fail("create", "droplet_limit", times=3)
        return driver(self.server, self.creds, self.site_id, **self.extra), ["refused"]


class TestLibcloudContract(CloudContract):
    @pytest.fixture
    def harness(self, cloud: DigitalOceanServer, secrets: Path) -> Iterator[CloudHarness]:
        yield LibcloudHarness(cloud, secrets)
        cloud.faults.clear()


def test_a_provider_without_tags_carries_site_and_worker_in_the_node_name(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    site = f"site-{next(_sites)}"
    do = driver(cloud, secrets, site, tag_style="name")
    (inst,) = do.launch(LaunchRequest(SIZE, ["w1"]))
    assert cloud.droplets[int(inst.id)]["name"] == f"{site}--w1"
    assert [(i.name, i.tags) for i in do.describe()] == [("w1", {SITE_TAG: site, WORKER_TAG: "w1"})]
    assert [i.id for i in do.launch(LaunchRequest(SIZE, ["w1"]))] == [inst.id]  # idempotent
    assert driver(cloud, secrets, "other", tag_style="name").describe() == []
    do.terminate([inst.id])


@pytest.mark.parametrize(
    ("operation", "error", "kind"),
    [
        ("create", "droplet_limit", ErrorKind.QUOTA),
        ("create", "size_unavailable", ErrorKind.CAPACITY),
        ("create", "image_not_found", ErrorKind.NOT_FOUND),
        ("create", "rate_limited", ErrorKind.THROTTLED),
        ("create", "server_error", ErrorKind.TRANSIENT),
        ("list", "unauthorized", ErrorKind.CREDENTIALS),
    ],
)
def test_provider_errors_come_with_the_kind_the_manager_acts_on(
    cloud: DigitalOceanServer, secrets: Path, operation: str, error: str, kind: ErrorKind
) -> None:
    refused = cloud.launch_error(
        driver(cloud, secrets, f"site-{next(_sites)}"), SIZE, operation, error
    )
    assert refused.kind is kind, refused


def test_a_size_or_image_the_provider_lacks_is_not_found(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    with pytest.raises(CloudError) as err:
        driver(cloud, secrets, "s").launch(LaunchRequest(VMType("g-64vcpu"), ["w1"]))
    assert err.value.kind is ErrorKind.NOT_FOUND and "size 'g-64vcpu'" in str(err.value)
    with pytest.raises(CloudError) as err:
        driver(cloud, secrets, "s", image="windows-xp").launch(LaunchRequest(SIZE, ["w1"]))
    assert err.value.kind is ErrorKind.NOT_FOUND


def test_tags_and_user_data_reach_the_provider(cloud: DigitalOceanServer, secrets: Path) -> None:
    site = f"site-{next(_sites)}"
    (inst,) = driver(cloud, secrets, site).launch(LaunchRequest(SIZE, ["w1"], {"node": "w1"}))
    droplet = cloud.droplets[int(inst.id)]
    assert f"{SITE_TAG}:{site}" in droplet["tags"] and f"{WORKER_TAG}:w1" in droplet["tags"]
    assert droplet["user_data"].startswith("#cloud-config")
    assert "ELASTICSITE_NODE=w1" in droplet["user_data"]


def test_the_driver_is_built_from_the_site_file_and_bad_options_are_refused(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    from elasticsite.config import ConfigError, parse_config

    options = {"provider": "digitalocean", "image": "debian-12-x64",
               "credentials_file": str(secrets)}  # fmt: skip
    cfg = parse_config({"clouds": [{"name": "do", "driver": "libcloud", "options": options}]})
    assert isinstance(cfg.clouds[0].options, LibcloudOptions)
    for bad, message in [
        ({**options, "provider": "digital_sea"}, r"options\.provider: not a libcloud provider"),
        ({**options, "driver_args": {"secret": "x"}}, r"secrets go in credentials_file"),
        ({"provider": "gce"}, r"options\.image"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"clouds": [{"name": "x", "driver": "libcloud", "options": bad}]})


def test_no_key_anywhere_is_a_credentials_error(
    cloud: DigitalOceanServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ELASTICSITE_LIBCLOUD_KEY", raising=False)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    with pytest.raises(CloudError) as err:
        driver(cloud, empty, "s")
    assert err.value.kind is ErrorKind.CREDENTIALS


def test_the_key_never_shows_in_errors_reprs_or_logs(
    cloud: DigitalOceanServer, secrets: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    do = driver(cloud, secrets, f"site-{next(_sites)}")
    cloud.fail("create", "server_error")
    with pytest.raises(CloudError) as err:
        do.launch(LaunchRequest(SIZE, ["w1"]))
    seen = " ".join([str(err.value), repr(do), repr(do.options), caplog.text])
    assert TOKEN not in seen


def test_the_node_list_is_narrowed_to_the_sites_tag(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    site = f"site-{next(_sites)}"
    driver(cloud, secrets, "another-site").launch(LaunchRequest(SIZE, ["theirs"]))
    do = driver(cloud, secrets, site)
    do.launch(LaunchRequest(SIZE, ["ours"]))
    cloud.queries.clear()
    assert [i.name for i in do.describe()] == ["ours"]
    [query] = cloud.queries
    assert f"tag_name=elasticsite-site%3A{site}" in query.split("&")


def test_sizes_images_and_regions_are_listed_once_and_refreshed_when_stale(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    do = driver(cloud, secrets, f"site-{next(_sites)}")
    cloud.seen.clear()
    for i in range(4):
        do.launch(LaunchRequest(SIZE, [f"w{i}"]))
    for _ in range(2):  # a size the provider lacks: listed again only after a while
        with pytest.raises(CloudError, match="no size 'g-64vcpu'"):
            do.launch(LaunchRequest(VMType("g-64vcpu"), ["big"]))
    assert [cloud.seen.count(op) for op in ("sizes", "images", "regions")] == [1, 1, 1]
    assert cloud.seen.count("create") == 4
    stale = driver(cloud, secrets, f"site-{next(_sites)}", catalog_ttl=0)
    cloud.seen.clear()
    stale.launch(LaunchRequest(SIZE, ["w1"]))
    stale.launch(LaunchRequest(SIZE, ["w2"]))
    assert [cloud.seen.count(op) for op in ("sizes", "images", "regions")] == [2, 2, 2]


def test_launches_after_a_describe_do_not_list_the_nodes_again(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    site = f"site-{next(_sites)}"
    do = driver(cloud, secrets, site)
    do.describe()  # what the manager does every step
    cloud.seen.clear()
    launched = [do.launch(LaunchRequest(SIZE, [f"w{i}"]))[0] for i in range(3)]
    assert [i.id for i in do.launch(LaunchRequest(SIZE, ["w0"]))] == [launched[0].id]  # idempotent
    do.describe()
    cloud.seen.clear()
    for inst in launched:  # one node per destroy_node: the manager runs them side by side
        do.terminate([inst.id])
    assert cloud.seen == ["delete"] * 3 and do.terminate_batch == 1
    assert driver(cloud, secrets, site).describe() == []


def test_launches_from_many_threads_each_get_their_own_node(
    cloud: DigitalOceanServer, secrets: Path
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    site = f"site-{next(_sites)}"
    do = driver(cloud, secrets, site)
    names = [f"w{i:02d}" for i in range(48)]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as on a busy machine
    try:
        with ThreadPoolExecutor(12) as pool:
            found = list(pool.map(lambda n: do.launch(LaunchRequest(SIZE, [n]))[0], names))
    finally:
        sys.setswitchinterval(switching)
    assert [i.name for i in found] == names
    assert {cloud.droplets[int(i.id)]["name"]: i.id for i in found} == {i.name: i.id for i in found}


def test_an_ec2_launch_through_libcloud_carries_a_client_token_and_a_tag_filter(
    tmp_path: Path,
) -> None:
    pytest.importorskip("moto")
    import hashlib

    import boto3
    from tests.clouds.ec2_server import FaultyEc2, moto_server

    creds = tmp_path / "aws.toml"
    creds.write_text('key = "testing"\nsecret = "testing"\n')
    creds.chmod(0o600)
    with moto_server() as url:
        proxy = FaultyEc2(url)  # answers with EC2's own namespace, as libcloud expects
        try:
            settings = LibcloudOptions.model_validate({
                "provider": "ec2", "image": "ami-03cf127a", "credentials_file": str(creds),
                "driver_args": {"region": "us-east-1", "signature_version": "4",
                                "host": "127.0.0.1", "port": proxy.url.rsplit(":", 1)[1],
                                "secure": False},
            })  # fmt: skip
            ec2 = LibcloudCloud.connect("aws", "site-a", settings)
            assert ec2.style == "ec2"
            (inst,) = ec2.launch(LaunchRequest(VMType("t3.micro"), ["w1"], {"node": "w1"}))
            shown = {i.name: i for i in ec2.describe()}
            assert shown["w1"].tags[SITE_TAG] == "site-a" and shown["w1"].id == inst.id
        finally:
            proxy.close()
        token = hashlib.sha256(b"site-a\0w1").hexdigest()
        client = boto3.client(
            "ec2", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        [reservation] = client.describe_instances()["Reservations"]
        assert reservation["Instances"][0]["ClientToken"] == token
    runs = [f for f in proxy.forms if "Action=RunInstances" in f]
    assert len(runs) == 1 and f"ClientToken={token}" in runs[0]
    lists = [f for f in proxy.forms if "Action=DescribeInstances" in f]
    assert lists and all("Filter.1.Name=tag%3Aelasticsite-site" in f for f in lists), lists
