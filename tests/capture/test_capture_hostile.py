"""Hostile stream entries never jam a shard: each is dead-lettered with a reason (or
captured, when it is a valid turn after all), and the shard's next turn is captured.

Random and adversarial entries (hypothesis) go onto one shard's stream before a
valid turn of another session on the same shard; a worker in burst mode must
leave nothing pending, crash never, and capture the valid turn.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from core.config import Settings
from core.events import STREAM_FIELD, encode
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from tests.helpers.hostile import bodies, json_values, odd_text
from workers.dev.fake_ov.app import FakeOV
from workers.store.connection import connect
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, shard_of

SHARD_MATE = "mate"
"""The valid session published after the hostile entries (every entry goes to its shard)."""


ELSEWHERE = next(s for s in (f"elsewhere-{i}" for i in range(100)) if shard_of(s, 4) != shard_of(SHARD_MATE, 4))
"""A session of another shard (of the tests' 4), published here as a producer with another
``shards`` count would."""


def _stream(settings: Settings) -> str:
    return Keys(settings.key_prefix).stream(shard_of(SHARD_MATE, settings.shards))


def _deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _event_with(**fields: Any) -> bytes:
    good = json.loads(encode(turn("hostile", 0)))
    return json.dumps({**good, **fields}).encode()


async def test_a_100k_deep_entry_is_dead_lettered_and_the_next_turn_captured(redis_client, settings, fake_ov):
    worker = make_worker(settings, fake_ov)
    deep_id = redis_client.xadd(_stream(settings), {STREAM_FIELD: _deep(100_000)}).decode()
    published = time.monotonic()
    publish(redis_client, settings, [turn(SHARD_MATE, 0)])
    ended = await run_until([worker], lambda: ov_texts(fake_ov, SHARD_MATE) == expected_texts(SHARD_MATE, 1))
    print(f"\nthe turn after a 100k-deep entry was captured {time.monotonic() - published:.2f}s after it was published")
    assert ended == [None]
    [letter] = list_dead_letters(redis_client, settings)
    assert letter.entry_id == deep_id and letter.reason == "undecodable" and "nested too deeply" in letter.error
    assert pending_count(redis_client, settings) == 0


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (_event_with(messages=[{"role": "user", "content": json.loads(_deep(900))}]), None),
        (_event_with(session_id=".."), None),
        (_event_with(session_id="."), None),
        (_event_with(session_id=ELSEWHERE), "belongs to shard"),
        (b"\xff\xfe{}", "invalid"),
        (b'{"v": 1, "event_id": "' + b"x" * 3000 + b'"', "invalid"),
        (b"x" * 5000, "maxBodyBytes"),
    ],
    ids=["deep-message", "dotdot-session", "dot-session", "other-shards-session", "not-utf8", "truncated", "oversize"],
)
async def test_odd_entries_never_jam_the_shard(redis_client, settings, fake_ov, payload: bytes, why: str | None):
    settings = settings.model_copy(update={"max_body_bytes": 4096})
    redis_client.xadd(_stream(settings), {STREAM_FIELD: payload})
    publish(redis_client, settings, [turn(SHARD_MATE, 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, SHARD_MATE) == expected_texts(SHARD_MATE, 1)
    assert pending_count(redis_client, settings) == 0
    letters = list_dead_letters(redis_client, settings)
    if why is not None:
        [letter] = letters
        assert why in letter.error
    for letter in letters:
        assert letter.reason and letter.error


_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "toolResult", "system", "", "x"]) | odd_text},
    optional={"content": json_values, "toolCallId": odd_text, "toolName": odd_text, "timestamp": json_values},
)
_event = st.fixed_dictionaries(
    {
        "v": st.just(1) | st.integers(),
        "event_id": odd_text,
        "session_id": odd_text,
        "published_at": st.floats() | json_values,
    },
    optional={
        "messages": st.lists(_message, max_size=4) | json_values,
        "pre_prompt_message_count": st.integers() | json_values,
        "session_key": odd_text | st.none(),
        "agent_id": odd_text | st.none(),
        "advancement_key": odd_text | st.none(),
        "commit": odd_text | st.none(),
        "user": odd_text | st.none(),
        "is_heartbeat": st.booleans() | json_values,
        "import_transcript": st.booleans() | json_values,
    },
)


_entry = bodies(_event)


@hsettings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(_entry, min_size=1, max_size=5))
async def test_no_entry_jams_a_shard(settings: Settings, entries: list[bytes]) -> None:
    settings = settings.model_copy(update={"key_prefix": f"hostile{time.monotonic_ns()}", "max_deliveries": 1})
    fake = FakeOV()
    client = connect(settings)
    try:
        for payload in entries:
            client.xadd(_stream(settings), {STREAM_FIELD: payload})
        publish(client, settings, [turn(SHARD_MATE, 0)])
        worker = make_worker(settings, fake)
        expected = expected_texts(SHARD_MATE, 1)
        caught_up = lambda: ov_texts(fake, SHARD_MATE) == expected and pending_count(client, settings) == 0  # noqa: E731
        ended = await run_until([worker], caught_up, timeout_s=20)
        assert ended == [None]
        for letter in list_dead_letters(client, settings):
            assert letter.reason and letter.error
    finally:
        client.close()
