"""The EC2 driver passes the shared driver contract against moto's EC2 server on 127.0.0.1,
through boto3 over HTTP; its errors carry the kind the manager acts on."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.clouds.contract import CloudContract, CloudHarness
from tests.clouds.ec2_server import FaultyEc2, credentials_file

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudDriver, CloudError, LaunchRequest
from elasticsite.clouds.ec2 import Ec2Cloud, Ec2Options
from elasticsite.clouds.errors import ErrorKind
from elasticsite.model import VMType

pytest.importorskip("boto3")
pytest.importorskip("moto")
pytestmark = pytest.mark.xdist_group("ec2-contract")  # one worker: one moto `endpoint`

IMAGE = "ami-03cf127a"  # one of moto's default images
_sites = itertools.count(1)


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return credentials_file(tmp_path_factory.mktemp("aws"))


def driver(url: str, creds: Path, site: str, **options: object) -> Ec2Cloud:
    settings = Ec2Options.model_validate(
        {"image_id": IMAGE, "endpoint_url": url, "credentials_file": str(creds), **options}
    )
    return Ec2Cloud.connect("ec2", site, settings)


class Ec2Harness(CloudHarness):
    vm_type = VMType("t3.micro", cores=2)
    step = 0.1

    def __init__(self, url: str, creds: Path) -> None:
        self.url, self.creds = url, creds
        self.site_id = f"site-{next(_sites)}"  # a fresh site: nothing of ours yet
        self.driver = driver(url, creds, self.site_id)
        self.proxies: list[FaultyEc2] = []

    def settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def neighbour(self) -> CloudDriver:
        return driver(self.url, self.creds, "another-site")

    def refusing(self) -> tuple[CloudDriver, list[str]]:
        proxy = FaultyEc2(self.url)
        self.proxies.append(proxy)
        proxy.fail("RunInstances", "InsufficientInstanceCapacity")
        return driver(proxy.url, self.creds, self.site_id, api_attempts=1), ["refused"]


class TestEc2Contract(CloudContract):
    @pytest.fixture
    def harness(self, endpoint: str, creds: Path) -> Iterator[CloudHarness]:
        harness = Ec2Harness(endpoint, creds)
        yield harness
        for proxy in harness.proxies:
            proxy.close()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", ErrorKind.CAPACITY),
        ("InstanceLimitExceeded", ErrorKind.QUOTA),
        ("RequestLimitExceeded", ErrorKind.THROTTLED),
        ("AuthFailure", ErrorKind.CREDENTIALS),
        ("InvalidAMIID.NotFound", ErrorKind.NOT_FOUND),
        ("InternalError", ErrorKind.TRANSIENT),
    ],
)
def test_ec2_errors_come_with_the_kind_the_manager_acts_on(
    proxy: FaultyEc2, creds: Path, code: str, kind: ErrorKind
) -> None:
    proxy.fail("RunInstances", code)
    cloud = driver(proxy.url, creds, f"site-{next(_sites)}", api_attempts=1)
    with pytest.raises(CloudError, match=code) as caught:
        cloud.launch(LaunchRequest(VMType("t3.micro"), ["w1"]))
    assert caught.value.kind is kind
    assert kind.blocks_cloud is (kind in (ErrorKind.CREDENTIALS, ErrorKind.NOT_FOUND))


def test_throttling_is_retried_by_the_sdk_with_backoff(proxy: FaultyEc2, creds: Path) -> None:
    proxy.fail("RunInstances", "RequestLimitExceeded", times=2)
    cloud = driver(proxy.url, creds, f"site-{next(_sites)}", api_attempts=4)
    (launched,) = cloud.launch(LaunchRequest(VMType("t3.micro"), ["w1"]))
    assert launched.name == "w1"
    assert proxy.seen.count("RunInstances") == 3  # two refusals, then the launch


def test_a_launch_retried_after_a_lost_answer_starts_nothing_twice(
    endpoint: str, creds: Path
) -> None:
    site = f"site-{next(_sites)}"
    cloud = driver(endpoint, creds, site)
    (first,) = cloud.launch(
        LaunchRequest(VMType("t3.micro"), ["w1"], {"node": "w1"}, {SITE_TAG: site})
    )
    again = driver(endpoint, creds, site)  # a restarted manager retries the same worker
    assert [i.id for i in again.launch(LaunchRequest(VMType("t3.micro"), ["w1"]))] == [first.id]
    assert [(i.name, i.tags[WORKER_TAG]) for i in again.describe()] == [("w1", "w1")]


@pytest.mark.parametrize(("known_for", "lookups"), [(60.0, 0), (0.0, 5)])
def test_a_scale_out_after_a_describe_costs_one_call_per_launch(
    proxy: FaultyEc2, creds: Path, known_for: float, lookups: int
) -> None:
    site = f"site-{next(_sites)}"
    cloud = driver(proxy.url, creds, site, known_for=known_for)
    cloud.describe()  # what the manager does every step
    proxy.seen.clear()
    for i in range(5):
        cloud.launch(LaunchRequest(VMType("t3.micro"), [f"w{i}"], {}, {SITE_TAG: site}))
    assert proxy.seen.count("RunInstances") == 5
    assert proxy.seen.count("DescribeInstances") == lookups
    (again,) = cloud.launch(LaunchRequest(VMType("t3.micro"), ["w0"], {}, {SITE_TAG: site}))
    assert proxy.seen.count("RunInstances") == 5, "a name launched twice"
    assert again.name == "w0"


def test_terminate_never_touches_another_sites_instance(endpoint: str, creds: Path) -> None:
    ours = driver(endpoint, creds, f"site-{next(_sites)}")
    theirs = driver(endpoint, creds, f"site-{next(_sites)}")
    (their,) = theirs.launch(LaunchRequest(VMType("t3.micro"), ["w1"]))
    ours.terminate([their.id])
    (still,) = theirs.describe()
    assert still.id == their.id and still.state.value in ("pending", "running")


def test_user_data_is_a_cloud_config_writing_a_root_only_file(endpoint: str, creds: Path) -> None:
    import base64

    cloud = driver(endpoint, creds, f"site-{next(_sites)}")
    (launched,) = cloud.launch(
        LaunchRequest(VMType("t3.micro"), ["w1"], {"node": "w1", "secret": "a'b"})
    )
    raw = cloud.client.describe_instance_attribute(InstanceId=launched.id, Attribute="userData")
    text = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert text.startswith("#cloud-config\n") and "permissions: '0600'" in text
    assert "ELASTICSITE_SECRET='a'\"'\"'b'" in text and "ELASTICSITE_WORKER_ID=w1" in text


def test_bad_options_are_refused_when_the_config_is_read() -> None:
    from elasticsite.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"clouds\[0\].options.image_id"):
        parse_config({"clouds": [{"name": "aws", "driver": "ec2", "options": {"image_id": "x"}}]})
    cfg = parse_config(
        {"clouds": [{"name": "aws", "driver": "ec2", "options": {"image_id": IMAGE}}]}
    )
    assert cfg.clouds[0].options.model_dump()["region"] == "us-east-1"


def test_a_spot_cloud_launches_spot_instances_with_its_price_cap(
    endpoint: str, proxy: FaultyEc2, creds: Path
) -> None:
    from elasticsite.config import parse_config

    config = parse_config(
        {
            "clouds": [
                {
                    "name": "aws-spot", "driver": "ec2", "spot": True, "spot_price_cap": 0.02,
                    "vm_types": [{"name": "t3.micro"}],
                    "options": {
                        "image_id": IMAGE, "endpoint_url": endpoint,
                        "credentials_file": str(creds),
                    },
                }
            ]
        }
    )  # fmt: skip
    [cloud] = config.clouds
    assert cloud.spec().spot and cloud.spec().spot_price_cap == 0.02
    site = f"site-{next(_sites)}"
    spot = Ec2Cloud.connect(
        "aws-spot", site, cloud.options.model_copy(update={"endpoint_url": proxy.url}),
        spot=True, spot_price_cap=0.02,
    )  # type: ignore[arg-type]  # fmt: skip
    (inst,) = spot.launch(LaunchRequest(VMType("t3.micro"), ["w1"], {}, {SITE_TAG: site}))
    raw = spot.client.describe_instances(InstanceIds=[inst.id])["Reservations"][0]
    assert raw["Instances"][0].get("InstanceLifecycle") == "spot"
    with pytest.raises(ValueError, match="spot_price_cap is set but spot is not"):
        parse_config({"clouds": [{"name": "x", "spot_price_cap": 0.1}]})


def test_an_instance_ec2_took_back_is_reported_reclaimed() -> None:
    # describe_instances' record of a spot instance after an interruption (AWS's
    # documented StateReason for it)
    raw = {
        "InstanceId": "i-0598c7d356eba48d7",
        "State": {"Code": 48, "Name": "terminated"},
        "StateReason": {
            "Code": "Server.SpotInstanceTermination",
            "Message": "Server.SpotInstanceTermination: Spot instance termination",
        },
        "InstanceLifecycle": "spot",
        "Tags": [{"Key": WORKER_TAG, "Value": "w1"}, {"Key": SITE_TAG, "Value": "s"}],
    }
    inst = Ec2Cloud._instance(raw)
    assert inst.reclaimed and inst.name == "w1"
    raw["StateReason"] = {"Code": "Client.UserInitiatedShutdown", "Message": "..."}
    assert not Ec2Cloud._instance(raw).reclaimed


def test_terminating_what_a_describe_showed_is_one_call_per_thousand_ids(
    proxy: FaultyEc2, creds: Path
) -> None:
    site = f"site-{next(_sites)}"
    cloud = driver(proxy.url, creds, site, batch_size=30)
    launched = cloud.launch(LaunchRequest(VMType("t3.micro"), [f"w{i}" for i in range(30)]))
    cloud.describe()  # what the manager does every step
    proxy.seen.clear()
    cloud.terminate([i.id for i in launched])
    assert proxy.seen == ["TerminateInstances"], "looked up or split up"
    assert {i.state.value for i in cloud.describe()} <= {"stopping", "terminated"}
    # ids it has not seen are looked up first: one filtered describe per 200
    proxy.seen.clear()
    fresh = driver(proxy.url, creds, site)
    fresh.terminate([i.id for i in launched] + ["i-0123456789abcdef0"])
    assert proxy.seen == ["DescribeInstances"], "terminated ones asked for again"


def test_an_id_ec2_has_forgotten_does_not_keep_the_others_up(proxy: FaultyEc2, creds: Path) -> None:
    site = f"site-{next(_sites)}"
    cloud = driver(proxy.url, creds, site, api_attempts=1)
    first, second = cloud.launch(LaunchRequest(VMType("t3.micro"), ["w1", "w2"]))
    cloud.describe()
    proxy.fail("TerminateInstances", "InvalidInstanceID.NotFound", times=1)
    cloud.terminate([first.id, second.id])
    assert proxy.seen.count("TerminateInstances") == 2  # refused, then the ones found
    assert {i.state.value for i in cloud.describe()} <= {"stopping", "terminated"}


def test_twenty_launch_threads_find_a_connection_each(
    endpoint: str, proxy: FaultyEc2, creds: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from elasticsite import plugins
    from elasticsite.config import parse_config

    proxy.delay("RunInstances", 0.2)  # a busy API: the threads' calls overlap
    config = parse_config({
        "manager": {"site_id": "pooled", "launch_threads": 20},
        "clouds": [{"name": "aws", "driver": "ec2", "options": {
            "image_id": IMAGE, "endpoint_url": proxy.url, "credentials_file": str(creds),
        }}],
    })  # fmt: skip
    [spec] = config.clouds
    site = plugins.SiteInfo("pooled", tmp_path, tmp_path / "batch.db", config)
    cloud = plugins.clouds.get("ec2").create(spec.options, spec, site)
    caplog.set_level(logging.WARNING, logger="urllib3")
    with ThreadPoolExecutor(20) as pool:
        names = [f"w{i:02d}" for i in range(40)]
        launched = list(
            pool.map(lambda n: cloud.launch(LaunchRequest(VMType("t3.micro"), [n])), names)
        )
    assert sorted(i.name for (i,) in launched) == names
    assert "Connection pool is full" not in caplog.text


def test_a_launch_looks_its_name_up_only_after_a_failed_launch_of_it(
    proxy: FaultyEc2, creds: Path
) -> None:
    site = f"site-{next(_sites)}"
    cloud = driver(proxy.url, creds, site, api_attempts=1)
    cloud.describe()
    cloud.known.clock = lambda: time.monotonic() + 3600  # the last listing long ago
    proxy.seen.clear()
    cloud.launch(LaunchRequest(VMType("t3.micro"), ["w1"], {}, {SITE_TAG: site}))
    assert proxy.seen == ["RunInstances"], "a slow listing made a launch look up"
    proxy.fail("RunInstances", "InternalError", times=1)  # its answer may be lost
    with pytest.raises(CloudError):
        cloud.launch(LaunchRequest(VMType("t3.micro"), ["w2"], {}, {SITE_TAG: site}))
    proxy.seen.clear()
    cloud.launch(LaunchRequest(VMType("t3.micro"), ["w2"], {}, {SITE_TAG: site}))
    assert proxy.seen == ["DescribeInstances", "RunInstances"]
    proxy.seen.clear()
    cloud.launch(LaunchRequest(VMType("t3.micro"), ["w3"], {}, {SITE_TAG: site}))
    assert proxy.seen == ["RunInstances"]


def test_drivers_share_the_service_model_but_not_their_credentials(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for path, key in ((first, "AKIDFIRST"), (second, "AKIDSECOND")):
        path.write_text(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = s\n")
        path.chmod(0o600)
    a = driver("http://127.0.0.1:9", first, "site-a")
    b = driver("http://127.0.0.1:9", second, "site-b")
    # botocore's loader, which holds EC2's service model once read, is one per process
    assert a.client._loader is b.client._loader
    keys = [d.client._request_signer._credentials.access_key for d in (a, b)]
    assert keys == ["AKIDFIRST", "AKIDSECOND"]
