"""The OpenStack driver passes the shared driver contract against a local OpenStack
(Keystone, Nova, Glance on 127.0.0.1 answering with recorded responses), through
openstacksdk over HTTP; its errors carry the kind the manager acts on."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clouds.contract import CloudContract, CloudHarness
from tests.clouds.openstack_server import PASSWORD, OpenStackServer, openrc, openstack_server

from elasticsite.clouds.base import (
    SITE_TAG,
    WORKER_TAG,
    CloudDriver,
    CloudError,
    InstanceState,
    LaunchRequest,
)
from elasticsite.clouds.errors import ErrorKind
from elasticsite.clouds.openstack import OpenStackCloud, OpenStackOptions
from elasticsite.model import VMType

pytest.importorskip("openstack")
# openstacksdk warns about its own coming changes on nearly every call
# One worker: one fake OpenStack `cloud` for the module.
pytestmark = [
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.xdist_group("openstack-contract"),
]

SMALL = VMType("m1.small", cores=1)
_sites = itertools.count(1)


@pytest.fixture(scope="module")
def cloud() -> Iterator[OpenStackServer]:
    with openstack_server() as server:
        yield server


@pytest.fixture(scope="module")
def rc(cloud: OpenStackServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return openrc(tmp_path_factory.mktemp("os"), cloud)


def driver(rc: Path, site: str, **options: object) -> OpenStackCloud:
    settings = OpenStackOptions.model_validate(
        {"image": "debian-12", "credentials_file": str(rc), "api_attempts": 1, **options}
    )
    return OpenStackCloud.connect("science", site, settings)


class OpenStackHarness(CloudHarness):
    vm_type = SMALL
    step = 0.05

    def __init__(self, server: OpenStackServer, rc: Path) -> None:
        self.server, self.rc = server, rc
        self.site_id = f"site-{next(_sites)}"
        self.driver = driver(rc, self.site_id)

    def settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def neighbour(self) -> CloudDriver:
        return driver(self.rc, "another-site")

    def refusing(self) -> tuple[CloudDriver, list[str]]:
        self.server.fail("create", "quota", times=3)
        return driver(self.rc, self.site_id), ["refused"]


class TestOpenStackContract(CloudContract):
    @pytest.fixture
    def harness(self, cloud: OpenStackServer, rc: Path) -> Iterator[CloudHarness]:
        harness = OpenStackHarness(cloud, rc)
        yield harness
        cloud.faults.clear()


@pytest.mark.parametrize(
    ("operation", "error", "kind"),
    [
        ("create", "quota", ErrorKind.QUOTA),
        ("create", "over_limit", ErrorKind.QUOTA),
        ("create", "image_not_found", ErrorKind.NOT_FOUND),
        ("create", "rate_limited", ErrorKind.THROTTLED),
        ("create", "unavailable", ErrorKind.TRANSIENT),
        ("list", "unavailable", ErrorKind.TRANSIENT),
    ],
)
def test_openstack_errors_come_with_the_kind_the_manager_acts_on(
    cloud: OpenStackServer, rc: Path, operation: str, error: str, kind: ErrorKind
) -> None:
    refused = cloud.launch_error(driver(rc, f"site-{next(_sites)}"), SMALL, operation, error)
    assert refused.kind is kind, refused


def test_a_flavour_the_cloud_lacks_is_not_found(cloud: OpenStackServer, rc: Path) -> None:
    os_cloud = driver(rc, f"site-{next(_sites)}", flavors={"huge": "m1.huge"})
    with pytest.raises(CloudError) as err:
        os_cloud.launch(LaunchRequest(VMType("huge"), ["w1"]))
    assert err.value.kind is ErrorKind.NOT_FOUND


def test_wrong_credentials_are_a_credentials_error(cloud: OpenStackServer, tmp_path: Path) -> None:
    bad = openrc(tmp_path, cloud, password="wrong")
    with pytest.raises(CloudError) as err:
        driver(bad, "site-x").describe()
    assert err.value.kind is ErrorKind.CREDENTIALS


def test_no_valid_host_errors_the_server_and_refuses_that_flavour_for_capacity(
    cloud: OpenStackServer, rc: Path
) -> None:
    site = f"site-{next(_sites)}"
    os_cloud = driver(rc, site)
    cloud.no_valid_host()
    (first,) = os_cloud.launch(LaunchRequest(SMALL, ["w1"], {}, {SITE_TAG: site}))
    [shown] = [i for i in os_cloud.describe() if i.name == "w1"]
    assert shown.state is InstanceState.ERROR
    with pytest.raises(CloudError) as err:
        os_cloud.launch(LaunchRequest(SMALL, ["w2"], {}, {SITE_TAG: site}))
    assert err.value.kind is ErrorKind.CAPACITY and "No valid host" in str(err.value)
    os_cloud.terminate([first.id])  # what the manager does with a failed worker's server
    assert os_cloud.launch(LaunchRequest(SMALL, ["w2"], {}, {SITE_TAG: site}))[0].name == "w2"


def test_user_data_and_metadata_reach_nova(cloud: OpenStackServer, rc: Path) -> None:
    import base64

    site = f"site-{next(_sites)}"
    (inst,) = driver(rc, site).launch(
        LaunchRequest(SMALL, ["w1"], {"node": "w1"}, {"purpose": "test"})
    )
    server = cloud.servers[inst.id]
    assert server["metadata"] == {SITE_TAG: site, WORKER_TAG: "w1", "purpose": "test"}
    document = base64.b64decode(server["user_data"]).decode()
    assert document.startswith("#cloud-config") and "ELASTICSITE_NODE=w1" in document
    assert "permissions: '0600'" in document


def test_the_driver_is_built_from_the_site_file_and_bad_options_are_refused(
    cloud: OpenStackServer, rc: Path
) -> None:
    from elasticsite.config import ConfigError, parse_config

    cfg = parse_config(
        {"clouds": [{"name": "science", "driver": "openstack", "vm_types": [{"name": "m1.small"}],
                     "options": {"image": "debian-12", "credentials_file": str(rc)}}]}
    )  # fmt: skip
    assert isinstance(cfg.clouds[0].options, OpenStackOptions)
    with pytest.raises(ConfigError, match=r"clouds\[0\]\.options.*auth_url"):
        parse_config({"clouds": [{"name": "x", "driver": "openstack",
                                  "options": {"image": "debian-12"}}]})  # fmt: skip
    bad = {"image": "i", "cloud": "c", "timeout": 0}
    with pytest.raises(ConfigError, match=r"clouds\[0\]\.options\.timeout"):
        parse_config({"clouds": [{"name": "x", "driver": "openstack", "options": bad}]})


def test_the_password_never_shows_in_errors_reprs_or_logs(
    cloud: OpenStackServer, rc: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    os_cloud = driver(rc, f"site-{next(_sites)}")
    cloud.fail("create", "unavailable")
    with pytest.raises(CloudError) as err:
        os_cloud.launch(LaunchRequest(SMALL, ["w1"]))
    seen = " ".join([str(err.value), repr(os_cloud), repr(os_cloud.options), caplog.text])
    assert PASSWORD not in seen


def test_servers_a_describe_showed_are_deleted_without_listing_again(
    cloud: OpenStackServer, rc: Path
) -> None:
    site = f"site-{next(_sites)}"
    os_cloud = driver(rc, site)
    launched = os_cloud.launch(LaunchRequest(SMALL, ["w1", "w2", "w3"], {}, {SITE_TAG: site}))
    os_cloud.describe()  # what the manager does every step
    cloud.seen.clear()
    for inst in launched:  # Nova deletes one per call: the manager runs them side by side
        os_cloud.terminate([inst.id])
    assert cloud.seen.count("delete") == 3 and "list" not in cloud.seen
    assert [i.name for i in os_cloud.describe()] == []
    assert os_cloud.terminate_batch == 1


def test_twenty_launch_threads_find_a_connection_each(
    cloud: OpenStackServer, rc: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from elasticsite import plugins
    from elasticsite.config import parse_config

    config = parse_config({
        "manager": {"site_id": "pooled", "launch_threads": 20},
        "clouds": [{"name": "science", "driver": "openstack", "options": {
            "image": "debian-12", "credentials_file": str(rc), "api_attempts": 1,
        }}],
    })  # fmt: skip
    [spec] = config.clouds
    site = plugins.SiteInfo(f"site-{next(_sites)}", tmp_path, tmp_path / "b.db", config)
    os_cloud = plugins.clouds.get("openstack").create(spec.options, spec, site)
    caplog.set_level(logging.WARNING, logger="urllib3")
    cloud.delay = 0.1  # a busy cloud: the threads' calls overlap
    try:
        with ThreadPoolExecutor(20) as pool:
            names = [f"w{i:02d}" for i in range(40)]
            found = list(pool.map(lambda n: os_cloud.launch(LaunchRequest(SMALL, [n])), names))
    finally:
        cloud.delay = 0.0
    assert sorted(i.name for (i,) in found) == names
    assert "Connection pool is full" not in caplog.text
