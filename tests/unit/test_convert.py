"""Capture (OpenClaw turn -> OV messages) and assemble (OV records -> AgentMessages)
conversions; cases ported from the reference plugin's afterTurn and assemble tests."""

from __future__ import annotations

from typing import Any

import pytest

from core.messages.convert import turn_to_ov_messages
from core.ov.messages import to_json
from tests.helpers.transcripts import text_msg, tool_part

# --- capture ------------------------------------------------------------------------------


def capture(messages: Any, count: Any, agent_id: str) -> list[dict[str, Any]]:
    """The OV message bodies capture sends for a turn, as JSON."""
    return to_json(turn_to_ov_messages(messages, count, agent_id))


CAPTURE_CASES: list[tuple[str, list[Any], Any, list[dict[str, Any]]]] = [
    ("empty transcript", [], 0, []),
    ("only a system message", [{"role": "system", "content": "system prompt"}], 0, []),
    (
        "messages before pre_prompt_message_count are not captured",
        [
            {"role": "user", "content": "old message"},
            {"role": "user", "content": "hello world, this is a new message"},
            {"role": "assistant", "content": [{"type": "text", "text": "hi there, nice to meet you"}]},
        ],
        1,
        [
            text_msg("user", "hello world, this is a new message"),
            text_msg("assistant", "hi there, nice to meet you", peer_id="agent-1"),
        ],
    ),
    (
        "system-only tail after the count",
        [{"role": "user", "content": "previous"}, {"role": "system", "content": "x"}],
        1,
        [],
    ),
    ("count beyond the transcript", [{"role": "user", "content": "hello"}], 5, []),
    ("negative count means from the start", [{"role": "user", "content": "hello"}], -3, [text_msg("user", "hello")]),
    ("missing count means from the start", [{"role": "user", "content": "hello"}], None, [text_msg("user", "hello")]),
    (
        "a bool is no count",
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        True,
        [text_msg("user", "a"), text_msg("user", "b")],
    ),
    (
        "recall blocks stripped from user and assistant text",
        [
            {
                "role": "user",
                "content": "my question <relevant-memories>injected memory data</relevant-memories> more text",
            },
            {"role": "assistant", "content": "Here is context <relevant-memories>data</relevant-memories> end"},
        ],
        0,
        [text_msg("user", "my question more text"), text_msg("assistant", "Here is context end", peer_id="agent-1")],
    ),
    (
        "a toolResult becomes an assistant tool part; the call-only assistant gives its text only",
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "running tool"},
                    {"type": "toolUse", "id": "t1", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
            {"role": "toolResult", "toolCallId": "t1", "toolName": "bash", "content": "file1.txt\nfile2.txt\n"},
            {"role": "assistant", "content": "done"},
        ],
        0,
        [
            text_msg("assistant", "running tool", peer_id="agent-1"),
            {
                "role": "assistant",
                "parts": [tool_part("file1.txt\nfile2.txt", tool_id="t1", tool_input={"cmd": "ls"})],
                "peer_id": "agent-1",
            },
            text_msg("assistant", "done", peer_id="agent-1"),
        ],
    ),
    (
        "adjacent tool results coalesce; a toolResult without id or name still captures",
        [
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "r", "name": "read", "arguments": {"path": "a.txt"}}],
            },
            {
                "role": "toolResult",
                "toolCallId": "r",
                "toolName": "read",
                "content": [{"type": "text", "text": " content of a "}],
            },
            {"role": "toolResult", "content": "ok", "isError": True},
            {"role": "assistant", "content": "all done"},
        ],
        0,
        [
            {
                "role": "assistant",
                "parts": [
                    tool_part("content of a", tool_id="r", name="read", tool_input={"path": "a.txt"}),
                    tool_part("ok", name="tool", status="error"),
                ],
                "peer_id": "agent-1",
            },
            text_msg("assistant", "all done", peer_id="agent-1"),
        ],
    ),
    (
        "tool parts separated by text stay separate messages",
        [
            {"role": "toolResult", "toolCallId": "a", "toolName": "x", "content": "1"},
            {"role": "user", "content": "between"},
            {"role": "toolResult", "toolCallId": "b", "toolName": "x", "content": "2"},
        ],
        0,
        [
            {"role": "assistant", "parts": [tool_part("1", tool_id="a", name="x")], "peer_id": "agent-1"},
            text_msg("user", "between"),
            {"role": "assistant", "parts": [tool_part("2", tool_id="b", name="x")], "peer_id": "agent-1"},
        ],
    ),
    (
        "tool output: text blocks joined by newline, other JSON, empty dropped",
        [
            {
                "role": "toolResult",
                "toolCallId": "a",
                "toolName": "x",
                "content": [
                    {"type": "text", "text": "l1 "},
                    {"type": "image", "data": "x"},
                    {"type": "text", "text": " l2"},
                ],
            },
            {"role": "toolResult", "toolCallId": "b", "toolName": "x", "content": {"exit": 0}},
            {"role": "toolResult", "toolCallId": "c", "toolName": "x", "content": "   "},
            {"role": "toolResult", "toolCallId": "d", "toolName": "x", "content": [{"type": "image", "data": "x"}]},
        ],
        0,
        [
            {
                "role": "assistant",
                "parts": [tool_part("l1\nl2", tool_id="a", name="x"), tool_part('{"exit":0}', tool_id="b", name="x")],
                "peer_id": "agent-1",
            }
        ],
    ),
    (
        "the tool input comes from a call before the captured slice",
        [
            {
                "role": "assistant",
                "content": [{"type": "toolUse", "id": "early", "name": "grep", "input": {"q": "TODO"}}],
            },
            {"role": "toolResult", "toolCallId": "early", "toolName": "grep", "content": "3 matches"},
        ],
        1,
        [
            {
                "role": "assistant",
                "parts": [tool_part("3 matches", tool_id="early", name="grep", tool_input={"q": "TODO"})],
                "peer_id": "agent-1",
            }
        ],
    ),
    (
        "aliases: OpenAI tool role, JSON-string arguments",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "ls", "arguments": '{"d": "/"}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "bin"},
        ],
        0,
        [
            {
                "role": "assistant",
                "parts": [tool_part("bin", tool_id="c1", name="ls", tool_input={"d": "/"})],
                "peer_id": "agent-1",
            }
        ],
    ),
    (
        "adjacent users stay separate; heartbeat-looking text is stored",
        [
            {
                "role": "user",
                "content": "Read HEARTBEAT.md if it exists. If nothing needs attention, reply HEARTBEAT_OK.",
            },
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": "HEARTBEAT_OK"},
        ],
        0,
        [
            text_msg("user", "Read HEARTBEAT.md if it exists. If nothing needs attention, reply HEARTBEAT_OK."),
            text_msg("user", "second question"),
            text_msg("assistant", "HEARTBEAT_OK", peer_id="agent-1"),
        ],
    ),
    (
        "custom roles are captured as user text; role-less and odd items skipped",
        [
            {"content": "no role"},
            "junk",
            {"role": "bashExecution", "content": "ran ls"},
            {"role": "user", "content": "   "},
        ],
        0,
        [text_msg("user", "ran ls")],
    ),
]


@pytest.mark.parametrize(
    ("messages", "count", "expected"), [c[1:] for c in CAPTURE_CASES], ids=[c[0] for c in CAPTURE_CASES]
)
def test_capture(messages: list[Any], count: Any, expected: list[dict[str, Any]]) -> None:
    assert capture(messages, count, "agent-1") == expected


def test_capture_keeps_code_and_paths() -> None:
    out = capture(
        [
            {"role": "user", "content": "Look at src/app.ts and run `npm install`"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Here's the code:\n```typescript\nexport const x = 1;\n```"}],
            },
        ],
        0,
        "a",
    )
    assert "src/app.ts" in out[0]["parts"][0]["text"] and "npm install" in out[0]["parts"][0]["text"]
    assert "export const x = 1" in out[1]["parts"][0]["text"]


def test_capture_without_agent_id_sets_no_peer() -> None:
    assert capture([{"role": "assistant", "content": "hi"}], 0, "") == [text_msg("assistant", "hi")]


@pytest.mark.parametrize(
    ("timestamps", "expected"),
    [
        # The reference case: the newest non-system message wins; system ones are ignored.
        (
            [1775037600000, 1775037660000, 1775037720000, 1775037780000, ("system", 1775037840000)],
            "2026-04-01T10:03:00.000Z",
        ),
        ([1775037660], "2026-04-01T10:01:00.000Z"),  # seconds
        ([1775037660.5], "2026-04-01T10:01:00.500Z"),
        ([1775037660000, None], "2026-04-01T10:01:00.000Z"),  # newest has none: the one before
        ([1775037660000, "2026-01-01"], "2026-04-01T10:01:00.000Z"),  # not a number
        ([float("nan")], None),
        ([1e300], None),  # out of range
        ([None], None),
    ],
    ids=["latest-ms", "seconds", "fraction", "skip-missing", "skip-string", "nan", "overflow", "none"],
)
def test_created_at_is_the_turns_latest_timestamp(timestamps: list[Any], expected: str | None) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "old", "timestamp": 1}]
    for i, ts in enumerate(timestamps):
        role, ts = ts if isinstance(ts, tuple) else (("user", "assistant")[i % 2], ts)
        messages.append({"role": role, "content": f"m{i}", "timestamp": ts})
    out = capture(messages, 1, "a")
    assert out and {m.get("created_at") for m in out} == {expected}


def test_capture_output_is_the_ov_message_body_shape() -> None:
    out = capture(
        [
            {"role": "user", "content": "q", "timestamp": 1},
            {"role": "assistant", "content": [{"type": "toolCall", "id": "t", "name": "n", "arguments": {}}]},
            {"role": "toolResult", "toolCallId": "t", "toolName": "n", "content": "r"},
        ],
        0,
        "a",
    )
    allowed_parts = {
        "text": {"type", "text"},
        "tool": {"type", "tool_id", "tool_name", "tool_input", "tool_output", "tool_status"},
    }
    for message in out:
        assert set(message) <= {"role", "parts", "peer_id", "created_at", "turn_id"}
        assert message["role"] in ("user", "assistant")
        for part in message["parts"]:
            assert set(part) <= allowed_parts[part["type"]]
            assert all(isinstance(part[k], str) for k in part if k != "tool_input")
