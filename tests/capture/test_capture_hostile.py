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
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from core.config import Settings
from core.events import STREAM_FIELD, encode
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from workers.dev.fake_ov.app import FakeOV
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, shard_of

SHARD_MATE = "mate"
"""The valid session published after the hostile entries (every entry goes to its shard)."""


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
        (b"\xff\xfe{}", "invalid"),
        (b'{"v": 1, "event_id": "' + b"x" * 3000 + b'"', "invalid"),
        (b"x" * 5000, "maxBodyBytes"),
    ],
    ids=["deep-message", "dotdot-session", "dot-session", "not-utf8", "truncated", "oversize"],
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


_text = st.text(max_size=40) | st.sampled_from(["", " ", ".", "..", "%2e%2e", "\x00", "\ud800", "a" * 2000])
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "toolResult", "system", "", "x"]) | _text},
    optional={"content": _json, "toolCallId": _text, "toolName": _text, "timestamp": _json},
)
_event = st.fixed_dictionaries(
    {"v": st.just(1) | st.integers(), "event_id": _text, "session_id": _text, "published_at": st.floats() | _json},
    optional={
        "messages": st.lists(_message, max_size=4) | _json,
        "pre_prompt_message_count": st.integers() | _json,
        "session_key": _text | st.none(),
        "agent_id": _text | st.none(),
        "advancement_key": _text | st.none(),
        "commit": _text | st.none(),
        "user": _text | st.none(),
        "is_heartbeat": st.booleans() | _json,
        "import_transcript": st.booleans() | _json,
    },
)


def _encoded(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


_entry = (
    _event.map(_encoded)
    | _json.map(_encoded)
    | st.binary(max_size=200)
    | st.integers(min_value=1, max_value=20_000).map(lambda d: b"[" * d + b"]" * d)
)


@hsettings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(_entry, min_size=1, max_size=5))
async def test_no_entry_jams_a_shard(redis_url: str, entries: list[bytes]) -> None:
    settings = Settings(
        redis_url=redis_url,
        key_prefix=f"hostile{time.monotonic_ns()}",
        shards=2,
        capture_block_ms=20,
        capture_settle_recheck_s=0.0,
        max_deliveries=1,
        ov_backoff_s=0.0,
        ov_retries=0,
        capture_retry_backoff_max_s=0.05,
    )
    fake = FakeOV()
    client = redis.Redis.from_url(redis_url)
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
