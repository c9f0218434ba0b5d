"""The urgent state in SQLite: tokens stored only as digests, team members changed
during a session, every attempt audited, repeated refusals rate-limited, and all of it
surviving a restart."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from elasticsite.urgent.store import HELD_BACK, RATE_LIMITED, UrgentStore
from elasticsite.urgent.tokens import Refusal, TokenState, Urgency, digest, new_token

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


def test_every_attempt_is_audited_and_repeated_refusals_hold_back_that_identity_only(
    store: UrgentStore,
) -> None:
    token, _ = store.issue(["cluster"], Urgency.RED, HOUR, 0.0, issued_by="admin")
    store.add_member(token.id, "ann", {"cluster": "ann"}, 0.0, "manager")
    store.activate(token, 0.0, "manager")
    for t in (1.0, 2.0, 3.0):
        assert store.authenticate("cluster", "mallory", Urgency.RED, t, "10.0.0.9")[0] is None
    # the fourth is refused unexamined, from any source; ann, from the same one, is not
    for source in ("10.0.0.9", "10.0.0.1"):
        assert store.authenticate("cluster", "mallory", Urgency.RED, 4.0, source) == (
            None,
            RATE_LIMITED,
        )
    assert store.authenticate("cluster", "ann", Urgency.RED, 5.0, "10.0.0.9")[1] is None
    # mallory on another resource is another subject
    assert store.authenticate("cloud", "mallory", Urgency.RED, 5.0, "10.0.0.9")[1] == (
        "no active session"
    )
    # the window passes: mallory is examined again (and refused for what she is)
    assert store.authenticate("cluster", "mallory", Urgency.RED, 70.0, "10.0.0.9")[1] == (
        "no active session"
    )
    attempts = [r for r in store.audit() if r.action in ("authenticate", HELD_BACK)]
    assert [(r.identity, r.ok, r.count) for r in attempts] == [
        ("mallory", False, 1), ("mallory", False, 1), ("ann", True, 1),
        ("mallory", False, 2), ("mallory", False, 1), ("mallory", False, 1),
        ("mallory", False, 1),
    ]  # fmt: skip
    assert (attempts[3].action, attempts[3].actor, attempts[3].reason) == (
        HELD_BACK, "mallory", RATE_LIMITED)  # fmt: skip
    refused = list(store.audit(identity="mallory", ok=False))
    assert len(refused) == 6 and refused[-1].source == "10.0.0.9"
    assert {r.action for r in store.audit()} >= {"issue", "add member", "activate"}


OLD_SCHEMA = """
CREATE TABLE tokens (id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE,
    resources TEXT NOT NULL, max_urgency INTEGER NOT NULL, session_seconds REAL NOT NULL,
    issued_at REAL NOT NULL, issued_by TEXT NOT NULL, label TEXT NOT NULL, activated_at REAL,
    expires_at REAL, revoked_at REAL, single_use INTEGER NOT NULL DEFAULT 0);
CREATE TABLE members (token_id TEXT NOT NULL REFERENCES tokens(id), name TEXT NOT NULL,
    resource TEXT NOT NULL, identity TEXT NOT NULL, PRIMARY KEY (token_id, name, resource));
CREATE INDEX members_identity ON members(resource, identity);
CREATE TABLE audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
    action TEXT NOT NULL, actor TEXT NOT NULL, token_id TEXT NOT NULL, resource TEXT NOT NULL,
    identity TEXT NOT NULL, urgency TEXT NOT NULL, ok INTEGER NOT NULL, reason TEXT NOT NULL,
    source TEXT NOT NULL);
CREATE INDEX audit_at ON audit(at);
CREATE INDEX audit_who ON audit(identity, at);
CREATE INDEX audit_refused_who ON audit(identity, at) WHERE ok = 0 AND action = 'authenticate';
CREATE INDEX audit_refused_source ON audit(source, at) WHERE ok = 0 AND action = 'authenticate';
CREATE TABLE principals (name TEXT PRIMARY KEY, key_digest TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL, resources TEXT NOT NULL, identities TEXT NOT NULL,
    created_at REAL NOT NULL);
INSERT INTO tokens VALUES ('t1', '{digest}', '["cluster"]', 3, 3600, 0, 'ops', 'storm', 10,
    3610, NULL, 0);
INSERT INTO members VALUES ('t1', 'ann', 'cluster', 'ann');
INSERT INTO audit (at, action, actor, token_id, resource, identity, urgency, ok, reason, source)
    VALUES (5, 'authenticate', '', '', '', '', '', 0, 'wrong token', '10.0.0.9');
"""


def test_a_store_written_by_the_previous_version_opens_and_is_migrated(tmp_path: Path) -> None:
    """An urgent.db from before refusals were counted per subject: its tokens, members
    and audit log are all there, and it takes the new rows (twice opened, once changed)."""
    value = new_token()
    with sqlite3.connect(tmp_path / "urgent.db") as old:
        old.executescript(OLD_SCHEMA.format(digest=digest(value)))
    old.close()
    for _ in range(2):
        store = UrgentStore(tmp_path / "urgent.db", max_failures=2, failure_window=60.0)
        found = store.by_value(value)
        assert found is not None and found.members == {"ann": {"cluster": "ann"}}
        assert store.authenticate("cluster", "ann", Urgency.RED, 20.0, "10.0.0.9")[1] is None
        store.close()
    store = UrgentStore(tmp_path / "urgent.db", max_failures=2, failure_window=60.0)
    first = list(store.audit())[-1]
    assert (first.reason, first.count, first.source) == ("wrong token", 1, "10.0.0.9")
    for _ in range(3):
        store.authenticate("cluster", "eve", Urgency.RED, 30.0, "10.0.0.9")
    newest = next(store.audit())
    assert (newest.action, newest.count) == (HELD_BACK, 1)
    indexes = {n for (n,) in store.db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "audit_refused_source" not in indexes and "strikes_subject" in indexes


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
