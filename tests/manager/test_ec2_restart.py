"""A manager on EC2 killed with SIGKILL mid scale-up, while run_instances answers are
still on their way, restarts and adopts every instance: none orphaned, none doubled.

The manager runs as its own process (``elasticsite run``) against moto's EC2 server on
127.0.0.1; a proxy holds back each run_instances answer after EC2 has started the
instance, so the kill lands when instances exist that the manager has not yet recorded.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import run_command, start_run
from tests.clouds.ec2_server import FaultyEc2, credentials_file, moto_server

from elasticsite.clouds.base import WORKER_TAG, InstanceState
from elasticsite.clouds.ec2 import Ec2Cloud, Ec2Options
from elasticsite.manager.store import StateStore

from .conftest import wait_for

pytest.importorskip("moto")

IMAGE = "ami-03cf127a"
WORKERS = 6

CONFIG = """
[manager]
site_id = "ec2-restart"
state_dir = "{state}"
interval = 0.2
retry_backoff = 0.2
launch_threads = 3

[policy]
name = "on_demand"

[[clouds]]
name = "aws"
driver = "ec2"
max_instances = {workers}
vm_types = [{{ name = "t3.micro", cores = 1 }}]
options = {{ image_id = "{image}", endpoint_url = "{url}", credentials_file = "{creds}", \
api_attempts = 1, timeout = 10 }}
"""


@pytest.fixture
def proxy() -> Iterator[FaultyEc2]:
    with moto_server() as url:
        faulty = FaultyEc2(url)
        yield faulty
        faulty.close()


def test_sigkill_mid_scale_up_on_ec2_then_restart_adopts_every_instance(
    tmp_path: Path, proxy: FaultyEc2
) -> None:
    state = tmp_path / "state"
    creds = credentials_file(tmp_path)
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        CONFIG.format(state=state, workers=WORKERS, image=IMAGE, url=proxy.url, creds=creds)
    )
    log = tmp_path / "manager.log"
    run_command("submit", "-c", str(cfg), "--walltime", "600", "--count", str(WORKERS), "--",
                "sleep", "1", check=True)  # fmt: skip
    ec2 = Ec2Cloud.connect(
        "aws", "ec2-restart",
        Ec2Options(image_id=IMAGE, endpoint_url=proxy.url, credentials_file=str(creds)),
    )  # fmt: skip

    def live() -> list[str]:
        return [
            i.tags.get(WORKER_TAG, "")
            for i in ec2.describe()
            if i.state in (InstanceState.PENDING, InstanceState.RUNNING)
        ]

    proxy.delay("RunInstances", 1.5)
    proc = start_run(cfg, log)
    try:
        # Kill once EC2 has started instances whose answers the manager still waits for.
        wait_for(lambda: len(live()) >= 2, 60, "instances started at EC2", every=0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        store = StateStore(state / "manager.db")
        unrecorded = {r.worker.id for r in store.load() if not r.worker.instance_id}
        started = set(live())
        assert started & unrecorded, "the kill did not land mid-launch"

        proxy.delay("RunInstances", 0.0)
        proc = start_run(cfg, log)

        def settled() -> bool:
            records = [r.worker for r in store.load()]
            return len(records) == WORKERS and all(w.instance_id for w in records)

        wait_for(settled, 60, "every worker to have its instance", every=0.2)
        time.sleep(1.0)  # a few more rounds: nothing is launched twice
        records = {r.worker.id: r.worker for r in store.load(include_done=True)}
        names = live()
        assert sorted(names) == sorted(set(names)), f"an instance launched twice: {names}"
        assert set(names) <= set(records), "an instance no worker record knows (orphan)"
        assert len(names) == WORKERS
        held = {w.instance_id for w in records.values() if w.state.live}
        assert held == {i.id for i in ec2.describe() if i.state is not InstanceState.TERMINATED}
        assert started <= set(names), "an instance started before the kill was lost"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text()[-3000:]
