import msgspec
import pytest

from core.events import (
    EVENT_VERSION,
    CommitOutcome,
    CommitRequest,
    ContextSnapshot,
    EventDecodeError,
    TurnEvent,
    decode,
    encode,
)
from core.ov.messages import OVMessage, TextPart, ToolPart

SAMPLES = [
    TurnEvent(
        event_id="e1",
        session_id="s",
        published_at=1.5,
        messages=[{"role": "user", "content": "hi"}],
        pre_prompt_message_count=0,
        session_key="agent:a:b",
        token_budget=1000,
    ),
    CommitRequest(
        commit_id="c-1", ov_session_id="s", agent_id="main", keep_recent_count=10, generation=3, requested_at=2.0
    ),
    CommitOutcome(
        commit_id="c-1",
        ov_session_id="s",
        agent_id="main",
        status="completed",
        task_id="t",
        archive_uri="viking://x/archive_001",
        archived=True,
        memories_extracted=2,
    ),
    ContextSnapshot(
        ov_session_id="s",
        agent_id="main",
        messages=[OVMessage(id="m", role="user", parts=[TextPart(text="hi"), ToolPart(tool_id="t", tool_output="ok")])],
        applied_stream_id="5-0",
        captured_through=4,
    ),
]


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_round_trip_and_version_on_the_wire(obj):
    data = encode(obj)
    assert msgspec.json.decode(data)["v"] == EVENT_VERSION
    assert decode(data, type(obj)) == obj


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\xff garbage", "malformed"),
        (b"[]", "Expected `object`"),
        (b'{"v": 2, "event_id": "e", "session_id": "s", "published_at": 1}', "unknown version"),
        (b'{"v": 1, "session_id": "s", "published_at": 1}', "event_id"),
        (b'{"v": 1, "event_id": "e", "session_id": 5, "published_at": 1}', "session_id"),
        (b'{"v": 1, "event_id": "e", "session_id": "s", "published_at": 1, "messages": "x"}', "messages"),
        (b'{"v": 1, "messages": [{"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}", "nested too deeply"),
        (b'{"a": ' * 5_000 + b"1" + b"}" * 5_000, "nested too deeply"),
        # a commit marker naming a reason no commit can carry is refused here, not as a job
        # that no worker can decode
        (b'{"v": 1, "event_id": "e", "session_id": "s", "published_at": 1, "commit": "bench"}', "commit"),
    ],
)
def test_decoding_garbage_raises_one_typed_error(data, reason):
    with pytest.raises(EventDecodeError, match=reason):
        decode(data, TurnEvent)


def test_unknown_fields_are_ignored_for_forward_compatibility():
    data = b'{"v": 1, "event_id": "e", "session_id": "s", "published_at": 1, "newField": true}'
    assert decode(data, TurnEvent).event_id == "e"


def test_commit_outcome_status_is_checked():
    bad = encode(SAMPLES[2]).replace(b'"completed"', b'"exploded"')
    with pytest.raises(EventDecodeError):
        decode(bad, CommitOutcome)
