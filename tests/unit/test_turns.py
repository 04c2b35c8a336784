"""core.turns: what a turn event contributes, and the overlay by identity."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.config import Settings
from core.events import TurnEvent
from core.turns import (
    SKIP_ADVANCEMENT_SEEN,
    SKIP_AUTO_CAPTURE_OFF,
    SKIP_BYPASSED,
    SKIP_HEARTBEAT,
    SKIP_SESSION_KNOWN,
    last_event_id,
    recall_turn_key,
    skip_reason,
    turn_messages,
    uncaptured_turns,
)

SETTINGS = Settings(redis_url="fakeredis://")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def event(eid: str, *messages: dict[str, Any], at: float = 0.0, **kw: Any) -> TurnEvent:
    return TurnEvent(event_id=eid, session_id="s1", messages=list(messages), published_at=at, **kw)


@pytest.mark.parametrize(
    ("ev", "settings", "seen", "known", "expected"),
    [
        (event("a", user("x")), SETTINGS, set(), False, None),
        (
            event("a", user("x")),
            Settings(redis_url="fakeredis://", auto_capture=False),
            set(),
            False,
            SKIP_AUTO_CAPTURE_OFF,
        ),
        (event("a", user("x"), is_heartbeat=True), SETTINGS, set(), False, SKIP_HEARTBEAT),
        (
            event("a", user("x"), session_key="agent:main:cron:1"),
            Settings(redis_url="fakeredis://", bypass_session_patterns=("agent:*:cron:**",)),
            set(),
            False,
            SKIP_BYPASSED,
        ),
        (event("a", user("x"), advancement_key="k1"), SETTINGS, {"k1"}, False, SKIP_ADVANCEMENT_SEEN),
        (event("a", user("x"), advancement_key="k1"), SETTINGS, {"k2"}, False, None),
        (event("a", user("x"), import_transcript=True), SETTINGS, set(), True, SKIP_SESSION_KNOWN),
        (event("a", user("x"), import_transcript=True), SETTINGS, set(), False, None),
        (event("a", user("x")), SETTINGS, set(), True, None),
    ],
)
def test_skip_reason(ev: TurnEvent, settings: Settings, seen: set[str], known: bool, expected: str | None) -> None:
    assert skip_reason(settings, ev, seen, session_known=known) == expected


@pytest.mark.parametrize(("pre", "expected"), [(0, ["a", "b", "c"]), (2, ["c"]), (3, []), (-1, ["a", "b", "c"])])
def test_turn_messages_start_at_the_pre_prompt_count(pre: int, expected: list[str]) -> None:
    ev = event("e", user("a"), user("b"), user("c"), pre_prompt_message_count=pre)
    assert [m["content"] for m in turn_messages(ev)] == expected


def texts(turns: Any) -> list[str]:
    return [m["content"] for t in turns for m in t.messages]


def test_each_turn_once_in_publish_order() -> None:
    events = [
        event("e2", user("two"), at=2),
        event("e1", user("one"), at=1),
        event("e2", user("two"), at=2),
        event("e3", user("three"), at=3),
    ]
    turns = uncaptured_turns(SETTINGS, events, reflected_event_ids=[], reflected_advancements=[], session_known=True)
    assert texts(turns) == ["one", "two", "three"]


def test_what_the_snapshot_reflects_is_left_out() -> None:
    events = [
        event("e1", user("one"), at=1),
        event("retry", user("one again"), at=2, advancement_key="k1"),
        event("e3", user("three"), at=3),
    ]
    turns = uncaptured_turns(
        SETTINGS, events, reflected_event_ids=["e1"], reflected_advancements=["k1"], session_known=True
    )
    assert texts(turns) == ["three"]


def test_markers_heartbeats_and_known_imports_add_nothing() -> None:
    events = [
        event("m", at=1, commit="session_end"),
        event("h", user("beat"), at=2, is_heartbeat=True),
        event("i", user("old"), at=0, import_transcript=True),
        event("t", user("new"), at=3),
    ]
    known = uncaptured_turns(SETTINGS, events, reflected_event_ids=[], reflected_advancements=[], session_known=True)
    assert texts(known) == ["new"]
    new = uncaptured_turns(SETTINGS, events, reflected_event_ids=[], reflected_advancements=[], session_known=False)
    assert texts(new) == ["old", "new"]


@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 5)), max_size=30), st.sets(st.sampled_from("abcdef"))
)
def test_no_turn_twice_and_none_reflected(draws: list[tuple[str, int]], reflected: set[str]) -> None:
    events = [event(eid, user(eid), at=float(at)) for eid, at in draws]
    turns = uncaptured_turns(
        SETTINGS, events, reflected_event_ids=sorted(reflected), reflected_advancements=[], session_known=True
    )
    ids = [t.event_id for t in turns]
    assert len(ids) == len(set(ids))
    assert not set(ids) & reflected
    assert set(ids) == {eid for eid, _ in draws} - reflected


def test_recall_turn_key_is_stable_within_a_turn_and_changes_with_the_next() -> None:
    turns = uncaptured_turns(
        SETTINGS,
        [event("e5", user("x"), at=5)],
        reflected_event_ids=["e4"],
        reflected_advancements=[],
        session_known=True,
    )
    within = recall_turn_key("sid", "-.main", "hello", last_event_id(["e4"], turns), 10)
    # Capture applied e5 meanwhile: the snapshot reflects it and nothing is pending; same turn.
    assert recall_turn_key("sid", "-.main", "hello", last_event_id(["e4", "e5"], []), 12) == within
    # The turn was committed (a new event): the same text is a new turn.
    assert recall_turn_key("sid", "-.main", "hello", last_event_id(["e4", "e5", "e6"], []), 12) != within
    assert recall_turn_key("sid", "-.main", "other", "e5", 10) != within
    assert recall_turn_key("sid", "-.main", "hello", "", 3) != recall_turn_key("sid", "-.main", "hello", "", 5)


def test_an_import_after_a_pending_turn_adds_nothing() -> None:
    # The import a process sends when it first sees a session repeats the turns before it.
    events = [
        event("t1", user("one"), at=1),
        event("i", user("one"), at=2, import_transcript=True),
        event("t2", user("two"), at=3),
    ]
    turns = uncaptured_turns(SETTINGS, events, reflected_event_ids=[], reflected_advancements=[], session_known=False)
    assert texts(turns) == ["one", "two"]
