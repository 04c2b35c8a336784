"""The pieces under the capture worker: applied offsets, round plans, publishing, connections."""

from __future__ import annotations

import asyncio

import pytest

from core.config import Settings
from core.events import STREAM_FIELD, TurnEvent, decode
from core.ids import ov_session_id
from core.ov.layout import ov_message_count
from core.ov.messages import OVMessage, TextPart, ToolPart
from tests.helpers.capture import turn
from workers.capture.plan import Entry, drop_written, finish_state, plan_round, session_of
from workers.store.applied import AppliedState, Intent
from workers.store.connection import connect, connect_async, reset_fake_server
from workers.store.keys import Keys, shard_of
from workers.store.streams import publish_turn


def _entry(settings: Settings, event: TurnEvent, entry_id: str) -> Entry:
    return Entry(entry_id, b"", event=event, session=session_of(settings, event))


# --- the applied offset ------------------------------------------------------------------


def test_settling_an_intent_counts_what_ov_stored():
    state = AppliedState(last_id="5-0", intent=Intent(10, [("6-0", 2), ("7-0", 3), ("8-0", 2)]))
    state.settle_intent(ov_total=13)  # 3 of 7 stored: entry 6 whole, entry 7 one of three
    assert (state.last_id, state.partial_id, state.partial_skip, state.total) == ("6-0", "7-0", 1, 13)
    assert state.intent is None


@pytest.mark.parametrize(
    ("ov_total", "last", "partial"),
    [(10, "5-0", None), (17, "8-0", None), (99, "8-0", None), (12, "7-0", None), (3, "5-0", None)],
)
def test_settling_edges(ov_total, last, partial):
    state = AppliedState(last_id="5-0", intent=Intent(10, [("6-0", 2), ("7-0", 0), ("8-0", 5)]))
    state.settle_intent(ov_total)
    assert state.last_id == last and state.partial_id == partial


def test_settling_never_moves_last_id_back():
    state = AppliedState(last_id="9-0", intent=Intent(0, [("6-0", 1)]))
    state.settle_intent(1)
    assert state.last_id == "9-0"


def test_applied_hash_round_trip():
    state = AppliedState(last_id="1-2", total=7, captured=4, advancements=["k1"])
    raw = {k.encode(): v.encode() for k, v in state.applied_fields().items()}
    back = AppliedState.from_hash(raw)
    assert (back.last_id, back.total, back.captured, back.advancements) == ("1-2", 7, 4, ["k1"])
    assert back.is_applied("1-1") and back.is_applied("1-2") and not back.is_applied("1-10")


def test_ov_splits_tool_only_user_messages():
    tool = ToolPart(tool_id="t", tool_name="x")
    assert ov_message_count(OVMessage(role="user", parts=[tool, tool, tool])) == 3
    assert ov_message_count(OVMessage(role="assistant", parts=[tool, tool])) == 1
    assert ov_message_count(OVMessage(role="user", parts=[tool, TextPart(text="t")])) == 1
    msgs = [OVMessage(role="user", parts=[tool, tool]), OVMessage(role="assistant", parts=[tool])]
    assert drop_written(msgs, 2) == msgs[1:]
    assert drop_written(msgs, 1) == msgs  # a split message is sent whole, never in part
    assert drop_written(msgs, 3) == []


# --- round plans ------------------------------------------------------------------------------


def test_plan_applies_the_seed_rules_in_order(settings):
    bypassing = settings.model_copy(update={"bypass_session_patterns": ("agent:*:cron:**",)})
    events = [
        turn("s", 0),
        turn("s", 1, is_heartbeat=True),
        turn("s", 2, advancement_key="A"),
        turn("s", 2, advancement_key="A"),  # the same commitTurn again, under a new event id
        turn("s", 3),
    ]
    entries = [_entry(settings, e, f"{i + 1}-0") for i, e in enumerate(events)]
    state = AppliedState(last_id="1-0")
    plan = plan_round(bypassing, entries[0].session, entries, state)
    assert [u.skip for u in plan.units] == ["applied before", "heartbeat", None, "advancement seen", None]
    assert [m.text for m in plan.messages] == ["s:q2", "s:a2", "s:q3", "s:a3"]
    assert all(m.peer_id == "main" for m in plan.messages if m.role == "assistant")
    plan.base, plan.added = 10, 4
    final = finish_state(plan)
    assert (final.last_id, final.total, final.captured, final.advancements) == ("5-0", 14, 8, ["A"])

    cron = _entry(settings, turn("x", 0, session_key="agent:main:cron:nightly"), "9-0")
    assert plan_round(bypassing, cron.session, [cron], AppliedState()).units[0].skip == "bypassed"
    off = settings.model_copy(update={"auto_capture": False})
    assert plan_round(off, entries[0].session, entries[1:], AppliedState()).messages == []


@pytest.mark.parametrize(
    ("captured", "expected"),
    [
        (4, ["s:q2", "s:a2", "s:q3", "s:a3", "s:q4", "s:a4"]),  # turns 2 and 3 never came: filled
        (8, ["s:q4", "s:a4"]),  # caught up: the turn alone
        (12, ["s:q4", "s:a4"]),  # the host's transcript got shorter (compaction): the turn alone
        (0, ["s:q4", "s:a4"]),  # nothing captured yet: no history is written (the import does that)
    ],
)
def test_an_after_turn_event_fills_the_gap_before_it(settings, captured: int, expected: list[str]):
    [entry] = [_entry(settings, turn("s", 4), "9-0")]
    plan = plan_round(settings, entry.session, [entry], AppliedState(last_id="1-0", captured=captured))
    assert [m.text for m in plan.messages] == expected
    assert finish_state(plan).captured == 10


def test_a_commit_turn_event_fills_no_gap(settings):
    event = turn("s", 4, advancement_key="K")  # (this helper's commitTurn carries the whole transcript)
    [entry] = [_entry(settings, event, "9-0")]
    plan = plan_round(settings, entry.session, [entry], AppliedState(last_id="1-0", captured=2))
    assert [m.text for m in plan.messages] == ["s:q4", "s:a4"]


def test_plan_in_isolate_mode_takes_one_writing_entry(settings):
    entries = [_entry(settings, turn("s", i), f"{i + 1}-0") for i in range(3)]
    plan = plan_round(settings, entries[0].session, entries, AppliedState(), isolate=True)
    assert [u.entry.id for u in plan.units] == ["1-0"]


def test_plan_skips_what_an_interrupted_write_stored(settings):
    entries = [_entry(settings, turn("s", 0, per_turn=3), "1-0")]
    plan = plan_round(settings, entries[0].session, entries, AppliedState(partial_id="1-0", partial_skip=2))
    assert [m.text for m in plan.messages] == ["s:a0.1"]


def test_plan_stops_at_an_entry_convert_cannot_read(settings, monkeypatch):
    import workers.capture.plan as plan_mod

    real = plan_mod.turn_to_ov_messages

    def picky(messages, pre, agent):
        if any("boom" in str(m.get("content")) for m in messages):
            raise TypeError("unreadable transcript")
        return real(messages, pre, agent)

    monkeypatch.setattr(plan_mod, "turn_to_ov_messages", picky)
    bad = turn("s", 1)
    bad.messages[-1]["content"] = [{"type": "text", "text": "boom"}]
    entries = [
        _entry(settings, turn("s", 0), "1-0"),
        _entry(settings, bad, "2-0"),
        _entry(settings, turn("s", 2), "3-0"),
    ]
    plan = plan_round(settings, entries[0].session, entries, AppliedState())
    assert [u.entry.id for u in plan.units] == ["1-0"]
    assert plan.failed_entry is entries[1] and isinstance(plan.failure, TypeError)


# --- publishing and connections ------------------------------------------------------------------


def test_publish_goes_to_the_sessions_shard(redis_client, settings):
    ids = {}
    for name in ("alpha", "beta", "gamma", "delta", "0F8FAD5B-D9CB-469F-A165-70867728950E"):
        event = turn(name, 0, session_key=None)
        ids[name] = publish_turn(redis_client, settings, event)
        shard = shard_of(ov_session_id(name, None), settings.shards)
        stream = Keys(settings.key_prefix).stream(shard)
        [(_entry_id, fields)] = redis_client.xrange(stream, ids[name], ids[name])
        assert decode(fields[STREAM_FIELD.encode()], TurnEvent).event_id == event.event_id


def test_publish_caps_nothing(redis_client, settings):
    for _i in range(2000):
        publish_turn(redis_client, settings, turn("same", 0))
    stream = Keys(settings.key_prefix).stream(shard_of("same", settings.shards))
    assert redis_client.xlen(stream) == 2000


async def test_fakeredis_url_shares_one_server_between_sync_and_async():
    reset_fake_server()
    embedded = Settings(redis_url="fakeredis://")
    try:
        connect(embedded).set("k", "v")
        aio = connect_async(embedded)
        assert await aio.get("k") == b"v"
        await aio.set("k2", "w")
        assert connect(embedded).get("k2") == b"w"
        await aio.aclose()
    finally:
        reset_fake_server()
    assert connect(embedded).get("k") is None


def test_real_url_connects(redis_url):
    assert connect(Settings(redis_url=redis_url)).ping()
    assert asyncio.run(_aping(redis_url))


async def _aping(url: str) -> bool:
    client = connect_async(Settings(redis_url=url), block_ms=100)
    try:
        return await client.ping()
    finally:
        await client.aclose()
