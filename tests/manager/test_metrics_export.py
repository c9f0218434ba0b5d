"""Prometheus metrics scraped over HTTP from a manager running the embedded site: they
change as workers come and go, and name what the issue's alert rules watch."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.cli import local_cloud, site_toml
from tests.context.conftest import free_port

from elasticsite.batch.base import JobRequest
from elasticsite.config import ConfigError, load_config
from elasticsite.manager.site import open_site
from elasticsite.model import JobState

from .conftest import Started, kill_workers, wait_for


def metered_site(port: int) -> str:
    """A site whose manager serves its metrics on ``port``, with one paid-for cloud."""
    return site_toml(
        "metered",
        local_cloud("lab", 2, seed=9, price_per_hour=0.5, billing_increment=1),
        state_dir="state",
        on_shutdown="drain",
        shutdown_timeout=30.0,
        metrics_port=port,
        policy={"name": "on_demand", "spend_cap_per_hour": 5.0},
    )


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_follow_workers_as_they_come_and_go(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "site.toml").write_text(metered_site(port))
    site = open_site(load_config(tmp_path / "site.toml"), tmp_path)
    running = Started(site, port)
    try:
        wait_for(lambda: value(scrape(port), "elasticsite_step_duration_seconds_count") > 0,
                 30, "a step")  # fmt: skip
        before = scrape(port)
        assert value(before, "elasticsite_spend_cap_per_hour") == 5.0
        assert value(before, "elasticsite_spend_rate_per_hour") == 0.0
        assert value(before, "elasticsite_launches_total", cloud="lab") == 0.0
        jobs = [site.batch.submit(JobRequest(["sleep", "2"], 1, 60.0)) for _ in range(2)]
        wait_for(lambda: value(scrape(port), "elasticsite_workers", cloud="lab", state="busy")
                 == 2, 60, "two busy workers")  # fmt: skip
        during = scrape(port)
        assert value(during, "elasticsite_launches_total", cloud="lab") == 2.0
        assert value(during, "elasticsite_spend_rate_per_hour") == pytest.approx(1.0)
        assert value(during, "elasticsite_running_jobs", group="default") == 2.0
        assert value(during, "elasticsite_running_cores", group="default") == 2.0
        assert value(during, "elasticsite_last_step_timestamp_seconds") > 0
        wait_for(lambda: all(site.batch.job(j).state is JobState.DONE for j in jobs), 60, "jobs")
        wait_for(lambda: value(scrape(port), "elasticsite_terminations_total", cloud="lab",
                               cause="drained") == 2, 60, "idle workers released")  # fmt: skip
        after = scrape(port)
        assert value(after, "elasticsite_workers", cloud="lab", state="busy") == 0.0
        assert value(after, "elasticsite_worker_failures_total", cloud="lab", cause="stalled") == 0
    finally:
        running.stop()
        kill_workers(site)


def test_the_metrics_address_must_be_an_address(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(metered_site(9100).replace('metrics_port = 9100',
                   'metrics_port = 9100\nmetrics_address = "0.0.0.0; rm -rf /"'))  # fmt: skip
    with pytest.raises(ConfigError, match=r"manager\.metrics_address: must be an IP address"):
        load_config(cfg)


def test_the_server_counts_contexts_members_and_waiting_polls(tmp_path: Path) -> None:
    import ssl

    from tests.context.conftest import BrokerProcess, node_info

    broker = BrokerProcess(tmp_path / "state", free_port())
    broker.start()
    try:
        verify = ssl.create_default_context(cafile=str(broker.cert))
        url = f"{broker.url}/metrics"
        token = broker.token_file.read_text().strip()

        def server_metrics() -> dict[str, float]:
            r = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, verify=verify)
            assert r.status_code == 200, r.text
            return {
                s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples
            }

        assert httpx.get(url, verify=verify).status_code == 401
        ctx = broker.admin().create("a")
        broker.admin().create("b")
        node = broker.node(ctx)
        node.join(node_info("w1"))
        polled = threading.Thread(target=lambda: node.updates(since=1, wait=5), daemon=True)
        polled.start()
        wait_for(lambda: server_metrics()["elasticsite_broker_waiting_polls"] == 1, 10, "a poll")
        got = server_metrics()
        assert got["elasticsite_broker_contexts"] == 2
        assert got["elasticsite_broker_members"] == 1
        polled.join(10)
        node.close()
    finally:
        broker.terminate()


def test_what_was_spent_is_a_counter_in_the_sites_currency_that_a_restart_keeps(
    tmp_path: Path,
) -> None:
    port = free_port()
    text = (
        metered_site(port)
        .replace(
            "spend_cap_per_hour = 5.0", "spend_cap_per_hour = 500.0\nbudget = { amount = 1e6 }"
        )
        .replace("price_per_hour = 0.5", "price_per_hour = 36.0")
    )
    (tmp_path / "site.toml").write_text('[site]\ncurrency = "CHF"\n\n' + text)

    def run_once(jobs: int) -> list[float]:
        """Run the manager until ``jobs`` jobs are done and their workers gone; the
        spent counter as scraped along the way."""
        site = open_site(load_config(tmp_path / "site.toml"), tmp_path)
        running = Started(site, port)
        seen: list[float] = []

        def spent() -> float:
            seen.append(value(scrape(port), "elasticsite_spent_total", cloud="lab",
                              currency="CHF"))  # fmt: skip
            return seen[-1]

        try:
            wait_for(lambda: value(scrape(port), "elasticsite_step_duration_seconds_count") > 0,
                     30, "a step")  # fmt: skip
            spent()
            ids = [site.batch.submit(JobRequest(["sleep", "1"], 1, 60.0)) for _ in range(jobs)]
            wait_for(lambda: all(site.batch.job(j).state is JobState.DONE for j in ids), 60,
                     "jobs")  # fmt: skip
            wait_for(lambda: not running.manager.records, 60, "every worker gone")
            wait_for(lambda: spent() == spent(), 30, "the spending to settle")
            body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "# HELP elasticsite_spent_total What the site's workers have cost so far" in body
            assert "in CHF" in body.split("# HELP elasticsite_spent_total")[1].splitlines()[0]
            assert "# HELP elasticsite_spend_rate_per_hour What the site's workers cost per " \
                   "hour now, in CHF" in body  # fmt: skip
            budget = scrape(port)
            assert value(budget, "elasticsite_budget", period="month", currency="CHF") == 1e6
            assert value(budget, "elasticsite_budget_spent", period="month", currency="CHF") > 0
            return seen
        finally:
            running.stop()
            kill_workers(site)

    first = run_once(1)
    assert first[0] == 0.0 and first[-1] > 0.0
    assert first == sorted(first)  # a counter: it never goes down
    again = run_once(1)
    # The second run starts where the first left off (the bills are in the store).
    assert again[0] == pytest.approx(first[-1])
    assert again == sorted(again) and again[-1] > again[0]
