"""One simulator scenario per cloud policy, on a full finite cloud, against paper 004."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from elasticsite.cli import app
from elasticsite.clouds.capacity_delays import reference
from elasticsite.clouds.capacity_policy import CloudPolicy as P
from elasticsite.policies import PolicySettings
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.elastic import simulate_elastic
from elasticsite.sim.urgent_cloud import Scenario, paper_scenario, run_scenario, summarize


def test_default_policy_lets_small_requests_starve_a_large_urgent_vm() -> None:
    r = run_scenario(Scenario(policy=P.DEFAULT, fill="m1.small"), seed=1)
    assert r.delays == [] and r.unplaced == 1  # freed cores always go to the next small VM


def test_urgent_only_refuses_others_so_the_urgent_vm_gets_the_room() -> None:
    r = run_scenario(Scenario(policy=P.URGENT_ONLY, fill="m1.small"), seed=1)
    assert r.refused > 0 and len(r.delays) == 1
    assert r.preempted == r.suspended == r.migrated == r.shrunk == 0


@pytest.mark.parametrize("fill", ["m1.small", "c1.xlarge"])
def test_preemption_starts_the_urgent_vm_as_fast_as_paper_004_measured(fill: str) -> None:
    s = summarize(Scenario(policy=P.PREEMPTION, fill=fill), trials=25)
    ref = reference(P.PREEMPTION, fill)
    assert ref is not None and isinstance(s["delay_mean"], float)
    assert abs(s["delay_mean"] - ref[0]) < 2 * ref[1]
    assert s["preempted"] == (4 if fill == "m1.small" else 1)


def test_suspended_vms_resume_by_themselves_when_the_urgent_vm_ends() -> None:
    sc = Scenario(policy=P.SUSPENSION, urgent_runtime=1200.0)
    r = run_scenario(sc, seed=3)
    assert r.suspended == 1 and len(r.suspended_for) == 1
    assert r.suspended_for[0] == pytest.approx(r.delays[0] + 1200.0)


def test_migration_moves_one_small_vm_and_it_is_briefly_unreachable() -> None:
    s = summarize(Scenario(policy=P.MIGRATION, nodes=2, fill="m1.small", free_cores=3))
    ref = reference(P.MIGRATION, "m1.small")
    assert ref is not None and isinstance(s["delay_mean"], float)
    assert abs(s["delay_mean"] - ref[0]) < 2 * ref[1]
    assert s["migrated"] == 1 and s["unavailable_for"] == pytest.approx(17, abs=3)


def test_qos_shrinks_volunteers_then_gives_their_cores_back() -> None:
    r = run_scenario(Scenario(policy=P.QOS, volunteers=1.0, urgent_runtime=900.0), seed=2)
    assert r.shrunk == 2 and len(r.delays) == 1 and len(r.shrunk_for) == 2
    none = run_scenario(Scenario(policy=P.QOS, volunteers=0.0, fill="c1.xlarge"), seed=2)
    assert none.shrunk == 0  # nobody volunteered: nobody is shrunk, the urgent VM waits


def test_the_cli_prints_each_policy_next_to_the_paper() -> None:
    out = CliRunner().invoke(app, ["urgent", "simulate", "--trials", "5", "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["policy"] for r in rows] == [
        "default", "urgent_only", "qos", "migration", "suspension", "preemption",
    ]  # fmt: skip
    assert rows[-1]["paper_mean"] == 270
    bad = CliRunner().invoke(app, ["urgent", "simulate", "--fill", "m9.huge"])
    assert bad.exit_code != 0 and "unknown VM type 'm9.huge'" in bad.output


def test_with_no_options_each_policy_runs_the_papers_own_condition() -> None:
    """Tables 4.12, 4.16, 4.19 and 4.23: one urgent c1.xlarge, every other VM a target;
    an empty node for default (the probe), two nodes of m1.small for migration."""
    out = CliRunner().invoke(app, ["urgent", "simulate", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["policy"]: r for r in map(json.loads, out.output.splitlines())}
    assert rows["default"]["scenario"] == "1 empty"
    assert rows["migration"]["scenario"] == "2 of m1.small, 3 free"
    assert rows["qos"]["scenario"] == rows["preemption"]["scenario"] == "1 of c1.xlarge, full"
    for name, hit in (
        ("qos", ("shrunk", 2)),
        ("migration", ("migrated", 1)),
        ("suspension", ("suspended", 1)),
        ("preemption", ("preempted", 1)),
    ):
        r = rows[name]
        assert r[hit[0]] == hit[1], r  # the VMs the paper's policy hit, in every trial
        assert abs(r["delay_mean"] - r["paper_mean"]) < r["paper_sd"], r  # fmt: skip
    assert abs(rows["default"]["delay_mean"] - 264) < 23.5
    assert rows["urgent_only"]["paper_mean"] is None  # the paper did not measure it


def test_urgent_vms_of_one_request_go_one_per_node_as_the_papers_round_robin() -> None:
    s = summarize(paper_scenario(P.PREEMPTION, count=16), trials=5)
    ref = reference(P.PREEMPTION, "c1.xlarge", 16, 1)  # Table 4.15: 364 +- 17.8
    assert ref is not None and isinstance(s["delay_mean"], float)
    assert s["preempted"] == 16 and abs(s["delay_mean"] - ref[0]) < 2 * ref[1]
    two = summarize(paper_scenario(P.PREEMPTION, count=2, nodes=1), trials=5)
    assert isinstance(two["delay_mean"], float) and two["delay_mean"] > 400  # 470 s for two


# --- the elastic site's own simulator, its cloud given hosts -----------------------


def _finite(policy: str, tenants: int, max_vms: int = 10) -> CloudModel:
    return CloudModel(
        "finite", vm_limit=max_vms, boot=Durations.constant(100.0), shutdown=Durations.constant(5),
        cores_per_vm=4, hosts=1, tenant_vms=tenants, urgent_policies=(("red", policy),),
        billing_increment=1.0,
    )  # fmt: skip


def test_in_the_site_simulator_an_urgent_launch_preempts_another_tenants_vm() -> None:
    arrivals = [(0.0, 4, 3000.0, 3600.0), (600.0, 4, 100.0, 200.0)]
    result = simulate_elastic(
        arrivals, [_finite("preemption", tenants=1)], "on_demand",
        PolicySettings(urgent_extra_instances=1), interval=10.0, urgency={1: "red"},
    )  # fmt: skip
    normal, urgent = result.jobs
    assert normal.finished_at == pytest.approx(normal.started_at + 3000.0)  # untouched
    assert urgent.started_at is not None
    delay = urgent.started_at - urgent.submitted_at
    assert 200 < delay < 360  # paper 004's ~270 s (Table 4.12), plus one decision interval
    counts = result.clouds[0]  # the model; what happened is on the run's cloud
    assert counts.hosts == 1


def test_in_the_site_simulator_a_suspended_worker_resumes_and_its_job_completes() -> None:
    arrivals = [(0.0, 4, 2000.0, 3600.0), (0.0, 4, 2000.0, 3600.0), (600.0, 4, 100.0, 200.0)]
    result = simulate_elastic(
        arrivals, [_finite("suspension", tenants=0)], "on_demand",
        PolicySettings(urgent_extra_instances=1), interval=10.0, urgency={2: "red"},
    )  # fmt: skip
    first, second, urgent = result.jobs
    assert all(j.finished_at is not None for j in result.jobs)
    assert urgent.started_at is not None and urgent.started_at - 600 < 400
    # One of the two was requeued when its worker was suspended, and ran again later.
    assert max(first.finished_at, second.finished_at) > 2000 + 100  # type: ignore[type-var]
