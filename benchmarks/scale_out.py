"""Scale a site from 0 to 1,000 workers on EC2 (moto's server on 127.0.0.1).

The real manager (policy, core, state store, its launch thread pool) runs against the
real boto3 driver over HTTP; 1,000 jobs wait in the queue. Measured: the time until
every one of the 1,000 launch requests is accepted by EC2 (each worker has its
instance id), and the launch rate in instances per minute.

Peers, in the same run: the same number of bare ``run_instances`` calls from as many
threads, with the same tags and user data and no manager at all (the ceiling the
cloud API sets here), so the ratio says which of the two bounds the rate; and the
published figures: Slurm's default ``ResumeRate`` of 300 nodes per minute, and paper
001's 475 instances in 15 minutes (about 32 per minute).

    python benchmarks/scale_out.py [--workers 1000] [--threads 10] [--deadline 900]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.clouds.ec2_server

from decision_loop import MemoryBatch
from tests.clouds.ec2_server import credentials_file, moto_server

from elasticsite import policies
from elasticsite.batch.base import BatchView
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG
from elasticsite.clouds.ec2 import Ec2Cloud, Ec2Options
from elasticsite.config import ManagerConfig
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, Job, VMType

IMAGE = "ami-03cf127a"  # one of moto's default images
VM = VMType("t3.micro", cores=1)
SLURM_RESUME_RATE = 300.0  # nodes per minute, slurm.conf's default ResumeRate
PAPER_001_RATE = 475 / 15.0  # instances per minute


def driver(url: str, creds: Path, site: str) -> Ec2Cloud:
    options = Ec2Options(
        image_id=IMAGE, endpoint_url=url, credentials_file=str(creds), api_attempts=1
    )
    return Ec2Cloud.connect("aws", site, options)


class Accepting:
    """The EC2 driver, noting when each launch came back accepted."""

    def __init__(self, inner: Ec2Cloud) -> None:
        self.inner = inner
        self.name = inner.name
        self.accepted: list[float] = []
        self.lock = threading.Lock()

    def launch(self, vm_type, names, userdata, tags):  # type: ignore[no-untyped-def]
        found = self.inner.launch(vm_type, names, userdata, tags)
        with self.lock:
            self.accepted.extend(time.perf_counter() for _ in found)
        return found

    def describe(self):  # type: ignore[no-untyped-def]
        return self.inner.describe()

    def terminate(self, instance_ids):  # type: ignore[no-untyped-def]
        self.inner.terminate(instance_ids)


def manager_run(
    url: str, creds: Path, tmp: Path, workers: int, threads: int, interval: float, deadline: float
) -> float:
    """Seconds from the manager's start until EC2 accepted every launch."""
    now = time.time()
    queued = [Job(str(i), 1, 3600.0, now) for i in range(workers)]
    spec = CloudSpec("aws", "ec2", max_instances=workers, vm_types=(VM,))
    cloud = Accepting(driver(url, creds, "scale"))
    manager = Manager(
        config=ManagerConfig(
            site_id="scale", interval=interval, launch_threads=threads, stall_timeout=3600.0
        ),
        batch=MemoryBatch(BatchView(now, queued, [], [])),
        clouds={"aws": cloud},
        specs=[spec],
        store=StateStore(tmp / "scale.db"),
        policy=policies.get("on_demand"),
        settings=policies.PolicySettings(),
    )
    start = time.perf_counter()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    last = start
    try:
        while len(cloud.accepted) < workers:
            elapsed = time.perf_counter() - start
            if elapsed > deadline:
                raise SystemExit(
                    f"deadline: {len(cloud.accepted)} of {workers} accepted after {elapsed:.0f} s"
                )
            if time.perf_counter() - last > 10:
                last = time.perf_counter()
                print(f"  {len(cloud.accepted):5d} of {workers} accepted after {elapsed:5.1f} s")
            time.sleep(0.05)
        return max(cloud.accepted) - start
    finally:
        manager.stop()
        manager.stop()
        thread.join(60)


def bare_run(url: str, creds: Path, workers: int, threads: int) -> float:
    """Seconds for ``workers`` run_instances calls, one instance each, from ``threads``."""
    cloud = driver(url, creds, "bare")
    client = cloud.client

    def one(i: int) -> None:
        name = f"bare-{i:05d}"
        client.run_instances(
            ImageId=IMAGE, InstanceType=VM.name, MinCount=1, MaxCount=1,
            UserData=f"#cloud-config\n# {name}\n",
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": SITE_TAG, "Value": "bare"}, {"Key": WORKER_TAG, "Value": name},
            ]}],
        )  # fmt: skip

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(workers)))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=10, help="the manager's launch_threads")
    parser.add_argument("--interval", type=float, default=10.0, help="the manager's interval")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds, then give up")
    args = parser.parse_args()
    n = args.workers
    with tempfile.TemporaryDirectory() as tmp:
        creds = credentials_file(Path(tmp))
        # A fresh server for each, so neither pays for the other's instances.
        with moto_server() as url:
            print(f"bare run_instances: {n} calls from {args.threads} threads ...", flush=True)
            bare = bare_run(url, creds, n, args.threads)
        with moto_server() as url:
            print(f"manager: 0 -> {n} workers, {args.threads} launch threads ...", flush=True)
            took = manager_run(url, creds, Path(tmp), n, args.threads, args.interval, args.deadline)
    rate = n / took * 60
    bare_rate = n / bare * 60
    print(f"bare API:  {n} instances in {bare:6.1f} s = {bare_rate:7.0f} per minute")
    print(f"manager:   {n} instances in {took:6.1f} s = {rate:7.0f} per minute")
    bound = "the cloud API (moto)" if rate >= 0.8 * bare_rate else "the manager"
    print(f"bounded by: {bound}")
    print(f"target of 1,000 per minute: {'met' if rate >= 1000 else 'MISSED'}")
    print(f"ratio to Slurm's ResumeRate (300/min): {rate / SLURM_RESUME_RATE:.1f}x")
    paper = f"paper 001 (475 in 15 min, {PAPER_001_RATE:.0f}/min)"
    print(f"ratio to {paper}: {rate / PAPER_001_RATE:.1f}x")
    print(f"ratio manager / bare API: {rate / bare_rate:.2f}")


if __name__ == "__main__":
    main()
