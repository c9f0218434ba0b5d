"""The urgent state in SQLite: tokens stored only as digests, team members changed
during a session, every attempt audited, repeated refusals rate-limited, and all of it
surviving a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from elasticsite.urgent.store import RATE_LIMITED, UrgentStore
from elasticsite.urgent.tokens import Refusal, TokenState, Urgency

HOUR = 3600.0


@pytest.fixture
def store(tmp_path: Path) -> UrgentStore:
    return UrgentStore(tmp_path / "urgent.db", max_failures=3, failure_window=60.0)


def test_a_token_is_kept_only_as_a_digest_and_found_by_its_value(
    tmp_path: Path, store: UrgentStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token, value = store.issue(["cluster"], Urgency.RED, 2 * HOUR, 0.0, issued_by="admin")
    assert store.by_value(value.lower()) is not None
    assert store.by_value("ABCD-EFGH-JKLM-NPQR") is None and store.by_value("junk") is None
    store.close()
    for f in tmp_path.iterdir():
        assert value.encode() not in f.read_bytes(), f
    assert value not in caplog.text
    assert token.digest in (tmp_path / "urgent.db").read_bytes().decode("latin-1")


def test_members_added_during_a_session_submit_at_once_and_removed_ones_cannot(
    store: UrgentStore,
) -> None:
    token, _ = store.issue(["cluster", "cloud"], Urgency.ORANGE, 6 * HOUR, 0.0, issued_by="admin")
    store.add_member(token.id, "ann", {"cluster": "ann"}, 1.0, "manager")
    store.activate(token, 10.0, "manager")
    assert store.authenticate("cluster", "bob", Urgency.YELLOW, 20.0) == (None, "no active session")
    store.add_member(token.id, "bob", {"cluster": "bob", "cloud": "bob@acct"}, 30.0, "manager")
    ok, why = store.authenticate("cluster", "bob", Urgency.ORANGE, 31.0)
    assert ok is not None and ok.id == token.id and why is None
    assert store.authenticate("cloud", "bob@acct", Urgency.YELLOW, 32.0)[1] is None
    assert store.authenticate("cluster", "bob", Urgency.RED, 33.0) == (
        None,
        Refusal.URGENCY.value,
    )
    store.remove_member(token.id, "bob", 40.0, "manager")
    assert store.authenticate("cluster", "bob", Urgency.YELLOW, 41.0) == (None, "no active session")
    assert store.authenticate("cluster", "ann", Urgency.YELLOW, 42.0)[1] is None


def test_sessions_expire_under_the_clock_and_say_so(store: UrgentStore) -> None:
    token, _ = store.issue(["cluster"], Urgency.RED, HOUR, 0.0, issued_by="admin")
    store.add_member(token.id, "ann", {"cluster": "ann"}, 0.0, "manager")
    assert store.authenticate("cluster", "ann", Urgency.RED, 5.0)[1] == Refusal.NOT_ACTIVE.value
    active = store.activate(token, 100.0, "manager")
    assert active.time_left(100.0 + 1800) == pytest.approx(1800)
    assert store.authenticate("cluster", "ann", Urgency.RED, 100.0 + HOUR - 1)[1] is None
    assert store.authenticate("cluster", "ann", Urgency.RED, 100.0 + HOUR)[1] == (
        Refusal.EXPIRED.value
    )
    assert store.get(token.id).state(100.0 + HOUR) is TokenState.EXPIRED  # type: ignore[union-attr]


def test_an_administrator_expires_or_revokes_a_token(store: UrgentStore) -> None:
    token, _ = store.issue(["cluster"], Urgency.RED, HOUR, 0.0, issued_by="admin")
    store.add_member(token.id, "ann", {"cluster": "ann"}, 0.0, "manager")
    store.activate(token, 10.0, "manager")
    store.expire(token.id, 20.0, "admin")
    assert store.authenticate("cluster", "ann", Urgency.RED, 21.0)[1] == Refusal.EXPIRED.value
    other, _ = store.issue(["cluster"], Urgency.RED, HOUR, 0.0, issued_by="admin")
    store.revoke(other.id, 30.0, "admin")
    with pytest.raises(ValueError, match="revoked"):
        store.activate(other, 31.0, "manager")


def test_every_attempt_is_audited_and_repeated_refusals_are_rate_limited(
    store: UrgentStore,
) -> None:
    token, _ = store.issue(["cluster"], Urgency.RED, HOUR, 0.0, issued_by="admin")
    store.add_member(token.id, "ann", {"cluster": "ann"}, 0.0, "manager")
    store.activate(token, 0.0, "manager")
    for t in (1.0, 2.0, 3.0):
        assert store.authenticate("cluster", "mallory", Urgency.RED, t, "10.0.0.9")[0] is None
    # the fourth is refused unexamined, even for a name that would pass, from that source
    assert store.authenticate("cluster", "ann", Urgency.RED, 4.0, "10.0.0.9") == (
        None,
        RATE_LIMITED,
    )
    assert store.authenticate("cluster", "ann", Urgency.RED, 5.0, "10.0.0.1")[1] is None
    # the window passes: mallory is examined again (and refused for what she is)
    assert store.authenticate("cluster", "mallory", Urgency.RED, 70.0, "10.0.0.9")[1] == (
        "no active session"
    )
    attempts = [r for r in store.audit() if r.action == "authenticate"]
    assert len(attempts) == 6
    assert [r.ok for r in attempts] == [False, True, False, False, False, False]
    refused = list(store.audit(identity="mallory", ok=False))
    assert len(refused) == 4 and refused[0].source == "10.0.0.9"
    assert {r.action for r in store.audit()} >= {"issue", "add member", "activate"}


def test_the_state_survives_a_restart(tmp_path: Path) -> None:
    first = UrgentStore(tmp_path / "u.db")
    token, value = first.issue(["cluster"], Urgency.YELLOW, HOUR, 0.0, issued_by="admin")
    first.add_member(token.id, "ann", {"cluster": "ann"}, 0.0, "manager")
    first.activate(token, 10.0, "manager")
    first.close()
    again = UrgentStore(tmp_path / "u.db")
    found = again.by_value(value)
    assert found is not None and found.state(20.0) is TokenState.ACTIVE
    assert found.members == {"ann": {"cluster": "ann"}}
    assert again.authenticate("cluster", "ann", Urgency.YELLOW, 20.0)[1] is None


@pytest.mark.parametrize(
    ("identities", "message"),
    [
        ({"other": "ann"}, "resource 'other' is not in the token"),
        ({"cluster": ""}, "identity on 'cluster' must be 1-128 printable characters"),
        ({"cluster": "ann\nroot"}, "must be 1-128 printable characters"),
        ({}, "needs an identity on at least one resource"),
    ],
)
def test_member_identities_are_checked(
    store: UrgentStore, identities: dict[str, str], message: str
) -> None:
    token, _ = store.issue(["cluster"], Urgency.YELLOW, HOUR, 0.0, issued_by="admin")
    with pytest.raises(ValueError, match=message):
        store.add_member(token.id, "ann", identities, 0.0, "manager")
    assert store.get(token.id).members == {}  # type: ignore[union-attr]
