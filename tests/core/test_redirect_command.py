"""A decision's redirects become batch commands, one in flight per job, failures told."""

from __future__ import annotations

from elasticsite import core
from elasticsite.model import CloudSpec, Decision, Redirect


def test_a_redirect_is_one_batch_command_per_job_and_its_failure_is_reported() -> None:
    state, config = core.CoreState(), core.CoreConfig("site", (CloudSpec("a"),))
    decision = Decision(redirect=[Redirect("7", "cloud"), Redirect("8", "cloud")])
    plan = core.Plan()
    core.apply(state, plan, config, 10.0, decision, {})
    assert plan.commands == [core.RedirectJob("7", "cloud"), core.RedirectJob("8", "cloud")]
    assert plan.counts == {"redirected": 2} and not plan.transitions

    again = core.Plan()
    core.apply(state, again, config, 11.0, decision, {})
    assert again.commands == []  # still in flight: not asked twice

    settled = core.Plan()
    outcomes = [
        core.Outcome(core.RedirectJob("7", "cloud"), 12.0),
        core.Outcome(core.RedirectJob("8", "cloud"), 12.0, error="job 8 is no longer queued"),
    ]
    core.settle(state, settled, config, 12.0, outcomes)
    assert settled.counts == {"redirect_errors": 1}
    assert settled.errors == ["redirect job 8 failed: job 8 is no longer queued"]
    assert not state.inflight
    assert Decision(redirect=[Redirect("8", "cloud")]).summary() == "redirect 1"
