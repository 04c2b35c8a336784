"""assemble as the 2026.9 plugin calls it: the user's text as ``prompt``, the
plugin's own turns (``heldTurns`` / ``recentTurns``), the overlay by identity
and the recall block once per turn. Real redis-server, FakeOV."""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec
import pytest

from core.events import TurnEvent, encode
from workers.store.applied import CAPTURED_THROUGH, EVENT_IDS, LAST_ID
from workers.store.keys import Keys, scope_of, shard_of
from workers.store.shard_map import reshard
from workers.store.streams import publish_raw, publish_turn

pytestmark = pytest.mark.redis

SID = "sess-turns"
RECALL_MARK = "<relevant-memories>"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def turn_event(n: int, at: float | None = None) -> TurnEvent:
    """commitTurn n of the session: its own two messages."""
    return TurnEvent(
        event_id=f"ev-{n}",
        session_id=SID,
        messages=[user(f"question {n}"), reply(f"answer {n}")],
        advancement_key=f"adv-{n}",
        published_at=at if at is not None else time.time() + n,
    )


def as_json(event: TurnEvent) -> dict[str, Any]:
    return json.loads(encode(event))


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


async def captured(rpc: Any, *events: TurnEvent) -> None:
    """OV holds ``events`` and capture recorded them (the snapshot will reflect their ids)."""
    await rpc.ov.add_messages(
        SID, [{"role": m["role"], "parts": [{"type": "text", "text": text_of(m)}]} for e in events for m in e.messages]
    )
    key = Keys(rpc.settings.key_prefix).applied(shard_of(SID, rpc.settings.shards), scope_of(None, "main"), SID)
    rpc.redis.hset(
        key,
        mapping={
            LAST_ID: "1700000000000-0",
            CAPTURED_THROUGH: 2 * len(events),
            EVENT_IDS: json.dumps([e.event_id for e in events]),
        },
    )


def plugin_call(
    prompt: str = "hello there",
    *,
    held: list[TurnEvent] = (),
    recent: list[TurnEvent] = (),
    messages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "sessionId": SID,
        "messages": messages or [],
        "prompt": prompt,
        "availableTools": [],
        "heldTurns": [as_json(e) for e in held],
        "recentTurns": [as_json(e) for e in recent],
    }


def texts(body: dict[str, Any]) -> list[str]:
    return [text_of(m) for m in body["messages"]]


async def test_every_turn_once_whatever_the_host_passes(rpc: Any) -> None:
    one, two, three = turn_event(1), turn_event(2), turn_event(3)
    await captured(rpc, one)
    publish_turn(rpc.redis, rpc.settings, two)  # published, capture has not got to it
    # The plugin sends turn 2 (published lately) and turn 3 (Redis has not taken it);
    # the host passes something unrelated (its own previous output) as messages.
    body = (
        await rpc.assemble(
            plugin_call(held=[three], recent=[one, two], messages=[user("question 1"), user("question 1")])
        )
    ).json()
    assert texts(body) == ["question 1", "answer 1", "question 2", "answer 2", "question 3", "answer 3"]


async def test_a_turn_another_process_published_is_read_from_the_stream(rpc: Any) -> None:
    one, two = turn_event(1), turn_event(2)
    await captured(rpc, one)
    publish_turn(rpc.redis, rpc.settings, two)  # e.g. a one-shot `openclaw agent --local`
    body = (await rpc.assemble(plugin_call(recent=[]))).json()
    assert texts(body)[-2:] == ["question 2", "answer 2"]


async def test_turns_on_both_sides_of_a_live_reshard_are_read_oldest_first(rpc: Any) -> None:
    one, two, three = turn_event(1), turn_event(2), turn_event(3)
    await captured(rpc, one)
    publish_turn(rpc.redis, rpc.settings, two)  # on the old stream, not applied yet
    reshard(rpc.redis, rpc.settings, 8)
    publish_turn(rpc.redis, rpc.settings, three)  # on the session's stream of generation 1
    body = (await rpc.assemble(plugin_call(recent=[]))).json()
    assert texts(body)[-4:] == ["question 2", "answer 2", "question 3", "answer 3"]


async def test_the_stream_is_read_only_when_the_newest_turn_is_unknown(rpc: Any) -> None:
    one, two = turn_event(1), turn_event(2)
    await captured(rpc, one)
    publish_turn(rpc.redis, rpc.settings, one)  # the newest published turn is one the snapshot has
    # An entry of the session that did not mark itself: read only if the stream is read.
    stream = Keys(rpc.settings.key_prefix).stream(shard_of(SID, rpc.settings.shards))
    publish_raw(rpc.redis, stream, encode(two))
    body = (await rpc.assemble(plugin_call())).json()
    assert "question 2" not in texts(body)  # not read: nothing said a turn was missing
    publish_turn(rpc.redis, rpc.settings, msgspec.structs.replace(two, event_id="ev-2b"))
    body = (await rpc.assemble(plugin_call())).json()
    assert texts(body).count("question 2") == 1  # read now; the two copies of turn 2 count once


async def test_recall_from_prompt_goes_into_the_system_prompt_once_per_turn(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers jasmine green tea in the morning.", category="preferences")
    one = turn_event(1)
    await captured(rpc, one)
    call = plugin_call("which tea do I like in the morning?", recent=[one])
    first = (await rpc.assemble(call)).json()
    finds = sum(1 for r in rpc.fake.requests if r.url.path.endswith("/search/find"))
    assert first["systemPromptAddition"].count(RECALL_MARK) == 1
    assert "jasmine" in first["systemPromptAddition"]
    assert all(RECALL_MARK not in t for t in texts(first))
    # The tool loop's next model request of the same turn: the same block, no new search.
    again = (await rpc.assemble(call)).json()
    assert again["systemPromptAddition"] == first["systemPromptAddition"]
    assert sum(1 for r in rpc.fake.requests if r.url.path.endswith("/search/find")) == finds
    # The next turn (one more committed turn), same words: searched again.
    two = turn_event(2)
    await rpc.assemble(plugin_call("which tea do I like in the morning?", recent=[one], held=[two]))
    assert sum(1 for r in rpc.fake.requests if r.url.path.endswith("/search/find")) > finds


async def test_a_new_session_gets_its_memories_too(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers jasmine green tea in the morning.", category="preferences")
    body = (await rpc.assemble(plugin_call("which tea do I like in the morning?"))).json()
    assert body["messages"] == []
    assert "jasmine" in body["systemPromptAddition"]


async def test_a_bad_held_turn_is_a_4xx_naming_the_field(rpc: Any) -> None:
    call = plugin_call()
    call["heldTurns"] = [{"event_id": "x"}]
    r = await rpc.assemble(call)
    assert r.status_code == 422
    assert "heldTurns" in r.json()["error"]["message"]


def counted(call: dict[str, Any], count: int) -> dict[str, Any]:
    """``call`` as the plugin sends it: the host's transcript as its count only."""
    slim = {k: v for k, v in call.items() if k != "messages"}
    return {**slim, "messageCount": count}


@pytest.mark.parametrize(
    ("case", "prompt", "held", "recent", "tail"),
    [
        ("a recent turn the snapshot lacks", "hello there", [], [1, 2], ["question 2", "answer 2"]),
        ("a turn Redis has not taken", "hello there", [3], [1], ["question 3", "answer 3"]),
        ("the turn's recall block", "which tea do I like in the morning?", [], [1], ["question 1", "answer 1"]),
    ],
)
async def test_a_transcript_sent_as_its_count_gets_the_same_answer(
    rpc: Any, case: str, prompt: str, held: list[int], recent: list[int], tail: list[str]
) -> None:
    rpc.fake.seed_memory("User prefers jasmine green tea in the morning.", category="preferences")
    await captured(rpc, turn_event(1))
    host = [user("question 1"), reply("answer 1"), user("question 2")]
    call = plugin_call(
        prompt, held=[turn_event(n) for n in held], recent=[turn_event(n) for n in recent], messages=host
    )
    sent = await rpc.assemble(call)
    slim = await rpc.assemble(counted(call, len(host)))
    assert sent.status_code == slim.status_code == 200, case
    assert slim.json() == sent.json(), case
    assert texts(slim.json())[-2:] == tail, case
    assert ("jasmine" in slim.json().get("systemPromptAddition", "")) == ("tea" in prompt), case


async def test_a_passthrough_of_a_counted_transcript_has_no_messages_to_return(rpc: Any) -> None:
    # Nothing in OV and no turn: the plugin passes the host's own messages through.
    body = (await rpc.assemble(counted(plugin_call("hi"), 7))).json()
    assert body["messages"] == []
    assert "systemPromptAddition" not in body


async def test_the_count_stands_for_the_turn_when_no_turn_exists_yet(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers jasmine green tea in the morning.", category="preferences")
    call = plugin_call("which tea do I like in the morning?")

    def finds() -> int:
        return sum(1 for r in rpc.fake.requests if r.url.path.endswith("/search/find"))

    first = (await rpc.assemble(counted(call, 2))).json()
    assert "jasmine" in first["systemPromptAddition"]
    searched = finds()
    assert (await rpc.assemble(counted(call, 2))).json() == first  # the same turn: no new search
    assert finds() == searched
    await rpc.assemble(counted(call, 4))  # two messages later: the next turn, searched again
    assert finds() > searched


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"messages": [user("x")]}, "not with them"),
        ({"heldTurns": None, "recentTurns": None}, "heldTurns or recentTurns"),
        ({"prompt": msgspec.UNSET, "availableTools": msgspec.UNSET}, "only on the main call"),
        ({"messageCount": -1}, "messageCount"),
        ({"messageCount": "3"}, "messageCount"),
    ],
)
async def test_a_count_where_assemble_needs_the_messages_is_a_4xx(rpc: Any, change: dict[str, Any], says: str) -> None:
    call = {**counted(plugin_call(), 3), **change}
    r = await rpc.assemble({k: v for k, v in call.items() if v is not msgspec.UNSET})
    assert r.status_code == 422, r.text
    assert says in r.json()["error"]["message"]
