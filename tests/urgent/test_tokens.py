"""Right-of-way tokens: their values, their life under an injected clock, and the rule
that says who may submit at which urgency where."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticsite.urgent.tokens import (
    ALPHABET,
    TOKEN_LENGTH,
    Refusal,
    Token,
    TokenState,
    Urgency,
    authorize,
    digest,
    new_token,
    normalize,
    show,
)

HOUR = 3600.0


def token(**change: object) -> Token:
    fields: dict[str, object] = dict(
        id="t1", digest="d", resources=frozenset({"cluster", "cloud"}),
        max_urgency=Urgency.ORANGE, session_seconds=6 * HOUR, issued_at=0.0, issued_by="admin",
        members={"ann": {"cluster": "ann", "cloud": "ann@cloud"}},
    )  # fmt: skip
    fields.update(change)
    return Token(**fields)  # type: ignore[arg-type]


def test_values_are_16_symbols_without_look_alikes() -> None:
    assert len(ALPHABET) == 32 and not set("01OI") & set(ALPHABET)
    values = {new_token() for _ in range(2000)}
    assert len(values) == 2000
    assert all(len(v) == TOKEN_LENGTH and set(v) <= set(ALPHABET) for v in values)


@given(st.text(alphabet=ALPHABET, min_size=16, max_size=16))
def test_a_token_typed_any_way_is_the_same_token(value: str) -> None:
    shown = show(value)
    assert shown.count("-") == 3
    for typed in (shown, shown.lower(), value, " ".join(shown.split("-"))):
        assert normalize(typed) == value
        assert digest(typed) == digest(value)


@pytest.mark.parametrize("typed", ["", "ABCD", "ABCD-EFGH-JKLM-NPQ0", "ABCDEFGHJKLMNPQRS"])
def test_what_cannot_be_a_token_is_refused(typed: str) -> None:
    with pytest.raises(ValueError, match="a token is 16 characters"):
        normalize(typed)


def test_a_session_starts_at_activation_and_expires_after_its_length() -> None:
    t = token()
    assert t.state(10 * HOUR) is TokenState.ISSUED and t.time_left(10 * HOUR) is None
    t.activate(10 * HOUR)
    assert t.state(10 * HOUR) is TokenState.ACTIVE
    assert t.time_left(12 * HOUR) == pytest.approx(4 * HOUR)
    assert t.state(16 * HOUR - 1) is TokenState.ACTIVE
    assert t.state(16 * HOUR) is TokenState.EXPIRED and t.time_left(16 * HOUR) is None
    with pytest.raises(ValueError, match="is expired; only an issued token starts"):
        t.activate(17 * HOUR)


def test_a_started_session_cannot_be_started_again_or_a_revoked_token_started() -> None:
    t = token()
    t.activate(0.0)
    with pytest.raises(ValueError, match="is active"):
        t.activate(1.0)
    r = token(revoked_at=5.0)
    assert r.state(6.0) is TokenState.REVOKED
    with pytest.raises(ValueError, match="is revoked"):
        r.activate(6.0)


def test_urgencies_order_and_parse() -> None:
    assert Urgency.RED > Urgency.ORANGE > Urgency.YELLOW
    assert Urgency.parse(" Red ") is Urgency.RED
    with pytest.raises(ValueError, match="choose red, orange or yellow"):
        Urgency.parse("purple")


@pytest.mark.parametrize(
    ("change", "resource", "identity", "urgency", "why"),
    [
        ({}, "cluster", "ann", Urgency.ORANGE, None),
        ({}, "cluster", "ann", Urgency.YELLOW, None),
        ({}, "cloud", "ann@cloud", Urgency.ORANGE, None),
        ({}, "cluster", "ann", Urgency.RED, Refusal.URGENCY),
        ({}, "other", "ann", Urgency.YELLOW, Refusal.RESOURCE),
        ({}, "cluster", "bob", Urgency.YELLOW, Refusal.NOT_MEMBER),
        ({}, "cloud", "ann", Urgency.YELLOW, Refusal.NOT_MEMBER),  # her cloud identity differs
        ({"activated_at": None, "expires_at": None}, "cluster", "ann", Urgency.YELLOW,
         Refusal.NOT_ACTIVE),
        ({"expires_at": 50.0}, "cluster", "ann", Urgency.YELLOW, Refusal.EXPIRED),
        ({"revoked_at": 50.0}, "cluster", "ann", Urgency.YELLOW, Refusal.REVOKED),
    ],
)  # fmt: skip
def test_authorize(
    change: dict[str, object], resource: str, identity: str, urgency: Urgency, why: Refusal | None
) -> None:
    t = token(**{"activated_at": 0.0, "expires_at": 6 * HOUR, **change})
    assert authorize(t, resource, identity, urgency, 100.0) == why


def test_no_token_is_no_session() -> None:
    assert authorize(None, "cluster", "ann", Urgency.YELLOW, 0.0) is Refusal.NO_SESSION


def test_a_token_names_a_resource_and_a_sane_session_length() -> None:
    with pytest.raises(ValueError, match="at least one resource"):
        token(resources=frozenset())
    with pytest.raises(ValueError, match="at most 30 days"):
        token(session_seconds=0.0)
