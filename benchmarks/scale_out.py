"""Scale a site from 0 to 1,000 workers on EC2 (moto's server on 127.0.0.1), then take
it down again.

The real manager (policy, core, state store, its launch thread pool) runs against the
real boto3 driver over HTTP; 1,000 jobs wait in the queue. Measured:

* **scale-out**: the time until every one of the 1,000 launch requests is accepted
  by EC2 (each worker has its instance id), and the launch rate per minute;
* **down**: ``elasticsite down`` of those workers (a second manager on the same state
  store, as the command runs): the time until EC2 accepted every termination, and
  until no worker is left (the cloud has shown every instance terminated and each
  record is closed), and how many ``terminate_instances`` calls it took.

Peers, in the same run, each on a fresh server holding as many instances: the same
number of bare ``run_instances`` calls from as many threads, each the very request
the driver sends (tags, user data, client token) with no manager at all (the
ceiling the cloud API sets here), then a bare ``terminate_instances`` loop, one
instance per call from as many threads, on the instances those calls started; and
the published figures: Slurm's default ``ResumeRate`` of 300 nodes per minute, and
paper 001's 475 instances in 15 minutes (about 32 per minute).

Where the time goes is printed too: the CPU seconds moto's server and the client
process spent on each run (read from ``/proc``), and the manager's describe calls
(moto's tag lookups make a listing cost grow with the square of the instances; the
manager does not list a cloud it has a backlog of launches for).

    python benchmarks/scale_out.py [--workers 1000] [--threads 10] [--interval 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.clouds.ec2_server

from decision_loop import MemoryBatch
from tests.clouds.ec2_server import credentials_file, moto_server

from elasticsite import policies
from elasticsite.batch.base import BatchView
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, LaunchRequest
from elasticsite.clouds.ec2 import Ec2Cloud, Ec2Options
from elasticsite.config import ManagerConfig
from elasticsite.core import worker_id
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, Job, VMType

IMAGE = "ami-03cf127a"  # one of moto's default images
VM = VMType("t3.micro", cores=1)
SLURM_RESUME_RATE = 300.0  # nodes per minute, slurm.conf's default ResumeRate
PAPER_001_RATE = 475 / 15.0  # instances per minute


def driver(url: str, creds: Path, site: str, threads: int) -> Ec2Cloud:
    # One try per call, and a long read timeout: moto on a busy two-core machine may
    # take more than the default 30 s to list or terminate 1,000 instances.
    options = Ec2Options(
        image_id=IMAGE, endpoint_url=url, credentials_file=str(creds), api_attempts=1,
        timeout=180.0,
    )  # fmt: skip
    return Ec2Cloud.connect("aws", site, options, pool_size=threads + 2)


def server_cpu() -> float:
    """CPU seconds of this process's children (moto's server), 0 where /proc is not."""
    total = 0.0
    try:
        tick = os.sysconf("SC_CLK_TCK")
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                total += (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError):
        return 0.0
    return total


@dataclass
class Usage:
    """Wall and CPU seconds of one run."""

    wall: float = 0.0
    client: float = 0.0
    server: float = 0.0

    def __str__(self) -> str:
        return f"CPU: client {self.client:5.1f} s, moto {self.server:5.1f} s"


class Metered:
    """Wall, client CPU and moto CPU from ``with`` to its end."""

    def __enter__(self) -> Usage:
        self.usage = Usage()
        self.started = (time.perf_counter(), time.process_time(), server_cpu())
        return self.usage

    def __exit__(self, *exc: object) -> None:
        wall, client, server = self.started
        self.usage.wall = time.perf_counter() - wall
        self.usage.client = time.process_time() - client
        self.usage.server = server_cpu() - server


@dataclass
class Calls:
    """What the manager asked of the cloud."""

    accepted: list[float] = field(default_factory=list)
    describes: list[tuple[float, int]] = field(default_factory=list)
    terminate_calls: int = 0
    terminated: int = 0
    terminated_at: float = 0.0


class Counting:
    """The EC2 driver, noting when each launch came back accepted, each describe's
    duration and every terminate call."""

    def __init__(self, inner: Ec2Cloud) -> None:
        self.inner = inner
        self.name = inner.name
        self.terminate_batch = inner.terminate_batch
        self.calls = Calls()
        self.lock = threading.Lock()

    def launch(self, request):  # type: ignore[no-untyped-def]
        found = self.inner.launch(request)
        with self.lock:
            self.calls.accepted.extend(time.perf_counter() for _ in found)
        return found

    def describe(self):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        found = self.inner.describe()
        with self.lock:
            self.calls.describes.append((time.perf_counter() - started, len(found)))
        return found

    def terminate(self, instance_ids):  # type: ignore[no-untyped-def]
        self.inner.terminate(instance_ids)
        with self.lock:
            self.calls.terminate_calls += 1
            self.calls.terminated += len(instance_ids)
            self.calls.terminated_at = time.perf_counter()


def manager(cloud: Counting, store: Path, workers: int, threads: int, interval: float) -> Manager:
    now = time.time()
    queued = [Job(str(i), 1, 3600.0, now) for i in range(workers)]
    return Manager(
        config=ManagerConfig(
            site_id="scale", interval=interval, launch_threads=threads, stall_timeout=3600.0
        ),
        batch=MemoryBatch(BatchView(now, queued, [], [])),
        clouds={"aws": cloud},
        specs=[CloudSpec("aws", "ec2", max_instances=workers, vm_types=(VM,))],
        store=StateStore(store),
        policy=policies.get("on_demand"),
        settings=policies.PolicySettings(),
    )


def scale_out(
    cloud: Counting, store: Path, workers: int, threads: int, interval: float, deadline: float
) -> float:
    """Seconds from the manager's start until EC2 accepted every launch; the manager is
    stopped then, leaving its workers (``on_shutdown = "leave"``)."""
    site = manager(cloud, store, workers, threads, interval)
    start = time.perf_counter()
    thread = threading.Thread(target=site.run, daemon=True)
    thread.start()
    last = start
    try:
        while len(cloud.calls.accepted) < workers:
            elapsed = time.perf_counter() - start
            if elapsed > deadline:
                raise SystemExit(
                    f"deadline: {len(cloud.calls.accepted)} of {workers} accepted after "
                    f"{elapsed:.0f} s"
                )
            if time.perf_counter() - last > 10:
                last = time.perf_counter()
                print(
                    f"  {len(cloud.calls.accepted):5d} of {workers} accepted after {elapsed:5.1f} s"
                )
            time.sleep(0.05)
        return max(cloud.calls.accepted) - start
    finally:
        site.stop()
        thread.join(120)


def down(
    cloud: Counting, store: Path, workers: int, threads: int, interval: float, deadline: float
) -> tuple[float, float, int]:
    """``elasticsite down`` of the site's workers: seconds until EC2 accepted every
    termination, seconds until no worker was left, and how many were left."""
    site = manager(cloud, store, workers, threads, interval)
    start = time.perf_counter()
    left = site.take_down(deadline)
    took = time.perf_counter() - start
    return cloud.calls.terminated_at - start, took, left


def bare_launches(cloud: Ec2Cloud, workers: int, threads: int) -> list[str]:
    """``workers`` run_instances calls, one instance each, from ``threads``: each the
    request the driver makes for a worker (tags, user data, client token)."""

    def one(i: int) -> str:
        name = worker_id("aws", i + 1)
        userdata = {"site_id": cloud.site_id, "worker_id": name, "node": name, "cloud": "aws",
                    "cores": str(VM.cores), "vm_type": VM.name}  # fmt: skip
        tags = {SITE_TAG: cloud.site_id, WORKER_TAG: name}
        reply = cloud.client.run_instances(
            **cloud.run_request(LaunchRequest(VM, [name], userdata, tags))
        )
        return str(reply["Instances"][0]["InstanceId"])

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(workers)))


def bare_terminations(cloud: Ec2Cloud, ids: list[str], threads: int) -> None:
    """One terminate_instances call per instance, from ``threads``."""
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: cloud.client.terminate_instances(InstanceIds=[i]), ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=10, help="the manager's launch_threads")
    parser.add_argument("--interval", type=float, default=10.0, help="the manager's interval")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds, then give up")
    args = parser.parse_args()
    n, threads = args.workers, args.threads
    with tempfile.TemporaryDirectory() as tmp:
        creds = credentials_file(Path(tmp))
        # A fresh server for each, so neither pays for the other's instances.
        with moto_server() as url:
            bare = driver(url, creds, "bare", threads)
            bare.client.describe_instances(MaxResults=5)  # moto loads its images first
            print(f"bare run_instances: {n} calls from {threads} threads ...", flush=True)
            with Metered() as bare_out:
                ids = bare_launches(bare, n, threads)
            print(f"  {bare_out.wall:.1f} s  ({bare_out})", flush=True)
            print(f"bare terminate_instances: {n} calls from {threads} threads ...", flush=True)
            with Metered() as bare_in:
                bare_terminations(bare, ids, threads)
            print(f"  {bare_in.wall:.1f} s  ({bare_in})", flush=True)
        with moto_server() as url:
            cloud = Counting(driver(url, creds, "scale", threads))
            cloud.inner.client.describe_instances(MaxResults=5)
            store = Path(tmp) / "scale.db"
            print(f"manager: 0 -> {n} workers, {threads} launch threads ...", flush=True)
            with Metered() as out:
                took = scale_out(cloud, store, n, threads, args.interval, args.deadline)
            print(f"  {took:.1f} s  ({out})", flush=True)
            listings = list(cloud.calls.describes)
            cloud.calls = Calls()
            print(f"manager: down of {n} workers ...", flush=True)
            with Metered() as into:
                accepted, gone, left = down(cloud, store, n, threads, args.interval, args.deadline)
            print(f"  {gone:.1f} s  ({into})", flush=True)
            calls = cloud.calls
    rate, bare_rate = n / took * 60, n / bare_out.wall * 60
    print(f"bare API:  {n} instances in {bare_out.wall:6.1f} s = {bare_rate:7.0f} per minute"
          f"  ({bare_out})")  # fmt: skip
    print(f"manager:   {n} instances in {took:6.1f} s = {rate:7.0f} per minute  ({out})")
    slowest = max(listings, default=(0.0, 0))
    print(f"  the manager's describes while scaling out: {len(listings)}, "
          f"{sum(d for d, _ in listings):.1f} s in all, the slowest {slowest[0]:.1f} s "
          f"for {slowest[1]} instances")  # fmt: skip
    ratio = rate / bare_rate
    if ratio >= 0.9:
        bound = (f"the cloud API: moto's server, which spent {out.server:.0f} s of CPU "
                 f"on the manager's {n} launches and {bare_out.server:.0f} s on the bare "
                 "calls")  # fmt: skip
    else:
        bound = (f"the manager: {out.client:.0f} s of its own CPU against "
                 f"{bare_out.client:.0f} s for the bare calls, and its describes")  # fmt: skip
    print(f"bounded by: {bound}")
    print(f"target of 1,000 per minute: {'met' if rate >= 1000 else 'MISSED'}")
    print(f"ratio to Slurm's ResumeRate (300/min): {rate / SLURM_RESUME_RATE:.1f}x")
    paper = f"paper 001 (475 in 15 min, {PAPER_001_RATE:.0f}/min)"
    print(f"ratio to {paper}: {rate / PAPER_001_RATE:.1f}x")
    print(f"ratio manager / bare run_instances: {ratio:.2f}")
    print(f"bare terminate_instances loop: {n} calls in {bare_in.wall:6.1f} s  ({bare_in})")
    print(f"manager down: {calls.terminated} terminations in {calls.terminate_calls} "
          f"terminate_instances call(s), all accepted after {accepted:.1f} s; "
          f"{'no worker left' if not left else f'{left} workers left'} after {gone:.1f} s  "
          f"({into})")  # fmt: skip
    print(f"down in under a minute: {'yes' if gone < 60 and not left else 'NO'}")
    print(f"ratio bare terminate_instances loop / manager down (terminations accepted): "
          f"{bare_in.wall / accepted:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
