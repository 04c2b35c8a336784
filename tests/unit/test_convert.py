"""Capture (OpenClaw turn -> OV messages) and assemble (OV records -> AgentMessages)
conversions; cases ported from the reference plugin's afterTurn and assemble tests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.messages.convert import (
    INTERRUPTED_TEXT,
    NO_OUTPUT_TEXT,
    archive_summary_message,
    merge_consecutive_assistants,
    ov_to_agent_messages,
    trim_to_budget,
    turn_to_ov_messages,
)
from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
)


def text_msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "text": text}], **extra}


def tool_part(
    output: str, *, tool_id: str | None = None, name: str = "bash", tool_input: Any = None, status: str = "completed"
) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool"}
    if tool_id:
        part["tool_id"] = tool_id
    part["tool_name"] = name
    if tool_input is not None:
        part["tool_input"] = tool_input
    part.update(tool_output=output, tool_status=status)
    return part


# --- capture ------------------------------------------------------------------------------

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
def test_turn_to_ov_messages(messages: list[Any], count: Any, expected: list[dict[str, Any]]) -> None:
    assert turn_to_ov_messages(messages, count, "agent-1") == expected


def test_capture_keeps_code_and_paths() -> None:
    out = turn_to_ov_messages(
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
    assert turn_to_ov_messages([{"role": "assistant", "content": "hi"}], 0, "") == [text_msg("assistant", "hi")]


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
    out = turn_to_ov_messages(messages, 1, "a")
    assert out and {m.get("created_at") for m in out} == {expected}


def test_capture_output_is_the_ov_message_body_shape() -> None:
    out = turn_to_ov_messages(
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


# --- assemble -------------------------------------------------------------------------------

ASSEMBLE_CASES: list[tuple[str, list[Any], list[dict[str, Any]]]] = [
    (
        "text, context abstract and a completed tool part",
        [
            {
                "id": "msg_1",
                "role": "assistant",
                "created_at": "2026-03-24T00:00:00Z",
                "parts": [
                    {"type": "text", "text": "I checked the latest context."},
                    {"type": "context", "abstract": "User prefers concise answers."},
                    tool_part(
                        "export const value = 1;",
                        tool_id="tool_123",
                        name="read_file",
                        tool_input={"path": "src/app.ts"},
                    ),
                ],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I checked the latest context."},
                    {"type": "text", "text": "User prefers concise answers."},
                    {"type": "toolCall", "id": "tool_123", "name": "read_file", "arguments": {"path": "src/app.ts"}},
                ],
            },
            {
                "role": "toolResult",
                "toolCallId": "tool_123",
                "toolName": "read_file",
                "content": [{"type": "text", "text": "export const value = 1;"}],
                "isError": False,
            },
        ],
    ),
    (
        "a running tool gives a non-error interrupted result",
        [
            {
                "role": "assistant",
                "parts": [tool_part("", tool_id="tool_running", tool_input={"command": "npm test"}, status="running")],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "tool_running", "name": "bash", "arguments": {"command": "npm test"}}
                ],
            },
            {
                "role": "toolResult",
                "toolCallId": "tool_running",
                "toolName": "bash",
                "content": [{"type": "text", "text": INTERRUPTED_TEXT}],
                "isError": False,
            },
        ],
    ),
    (
        "a tool part without tool_id becomes text",
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "text": "Tool state snapshot:"},
                    tool_part(
                        "src/app.ts:17 TODO refine this", tool_id="", name="grep", tool_input={"pattern": "TODO"}
                    ),
                ],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Tool state snapshot:"},
                    {
                        "type": "text",
                        "text": '[grep] (completed)\nInput: {"pattern":"TODO"}\nOutput: src/app.ts:17 TODO refine this',
                    },
                ],
            }
        ],
    ),
    (
        "a tool-only user record gives no user message",
        [{"role": "user", "parts": [tool_part("file.txt", tool_id="tool_abc", tool_input={"command": "ls"})]}],
        [
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "tool_abc", "name": "bash", "arguments": {"command": "ls"}}],
            },
            {
                "role": "toolResult",
                "toolCallId": "tool_abc",
                "toolName": "bash",
                "content": [{"type": "text", "text": "file.txt"}],
                "isError": False,
            },
        ],
    ),
    (
        "errored, empty-output and JSON-string-input tools; nameless tool is unknown",
        [
            {
                "role": "assistant",
                "parts": [
                    tool_part("boom", tool_id="e", status="error"),
                    {
                        "type": "tool",
                        "tool_id": "n",
                        "tool_input": '{"a": 1}',
                        "tool_output": "",
                        "tool_status": "completed",
                    },
                ],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "e", "name": "bash", "arguments": {}},
                    {"type": "toolCall", "id": "n", "name": "unknown", "arguments": {"a": 1}},
                ],
            },
            {
                "role": "toolResult",
                "toolCallId": "e",
                "toolName": "bash",
                "content": [{"type": "text", "text": "boom"}],
                "isError": True,
            },
            {
                "role": "toolResult",
                "toolCallId": "n",
                "toolName": "unknown",
                "content": [{"type": "text", "text": NO_OUTPUT_TEXT}],
                "isError": False,
            },
        ],
    ),
    (
        "user texts join with a newline; empty records and odd parts give nothing",
        [
            {
                "role": "user",
                "parts": [
                    {"type": "text", "text": "a"},
                    {"type": "context", "abstract": ""},
                    {"type": "context", "abstract": "b"},
                    "junk",
                    {"type": "weird"},
                ],
            },
            {"role": "assistant", "parts": []},
            {"role": "user", "parts": None},
            "not a record",
        ],
        [{"role": "user", "content": "a\nb"}],
    ),
    (
        "OV's split assistant text and tool messages merge back into one turn",
        [
            text_msg("user", "q"),
            text_msg("assistant", "running tool"),
            {"role": "assistant", "parts": [tool_part("out", tool_id="t")]},
            text_msg("assistant", "done"),
        ],
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "running tool"},
                    {"type": "toolCall", "id": "t", "name": "bash", "arguments": {}},
                ],
            },
            {
                "role": "toolResult",
                "toolCallId": "t",
                "toolName": "bash",
                "content": [{"type": "text", "text": "out"}],
                "isError": False,
            },
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        ],
    ),
    (
        "an externalised output keeps its reference",
        [
            {
                "role": "assistant",
                "parts": [
                    tool_part("head...", tool_id="t")
                    | {"tool_output_ref": "viking://x", "tool_output_original_chars": 900}
                ],
            }
        ],
        [
            {"role": "assistant", "content": [{"type": "toolCall", "id": "t", "name": "bash", "arguments": {}}]},
            {
                "role": "toolResult",
                "toolCallId": "t",
                "toolName": "bash",
                "content": [{"type": "text", "text": "head...\n[tool-result-ref] viking://x original_chars=900"}],
                "isError": False,
            },
        ],
    ),
]


@pytest.mark.parametrize(("records", "expected"), [c[1:] for c in ASSEMBLE_CASES], ids=[c[0] for c in ASSEMBLE_CASES])
def test_ov_to_agent_messages(records: list[Any], expected: list[dict[str, Any]]) -> None:
    assert dump_messages(ov_to_agent_messages(records)) == expected


def test_capture_then_assemble_round_trip_keeps_the_tool_pair() -> None:
    turn = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "sure"},
                {"type": "toolCall", "id": "t", "name": "ls", "arguments": {"d": "."}},
            ],
        },
        {"role": "toolResult", "toolCallId": "t", "toolName": "ls", "content": "a b", "isError": False},
        {"role": "assistant", "content": "two files"},
    ]
    back = ov_to_agent_messages(turn_to_ov_messages(turn, 0, "agent"))
    assert back == [
        UserMessage(content="list files"),
        AssistantMessage(content=[TextBlock(text="sure"), ToolCallBlock(id="t", name="ls", arguments={"d": "."})]),
        ToolResultMessage(toolCallId="t", toolName="ls", content=[TextBlock(text="a b")]),
        AssistantMessage(content=[TextBlock(text="two files")]),
    ]


def test_archive_summary_message() -> None:
    assert archive_summary_message("# Summary\nstuff") == UserMessage(
        content="[Session History Summary]\n# Summary\nstuff"
    )


def test_merge_consecutive_assistants_keeps_first_fields() -> None:
    first = AssistantMessage(content=[TextBlock(text="a")], stopReason="toolUse", timestamp=1)
    merged = merge_consecutive_assistants([first, AssistantMessage(content=[TextBlock(text="b")], timestamp=2)])
    assert merged == [
        AssistantMessage(content=[TextBlock(text="a"), TextBlock(text="b")], stopReason="toolUse", timestamp=1)
    ]


# --- budget ---------------------------------------------------------------------------------


def count(msgs: list[AgentMessage]) -> int:
    """One token per message: budgets read as message counts."""
    return len(msgs)


def call(call_id: str) -> AssistantMessage:
    return AssistantMessage(content=[ToolCallBlock(id=call_id, name="n")])


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(toolCallId=call_id, toolName="n")


u1, u2, u3 = (UserMessage(content=f"u{i}") for i in (1, 2, 3))


@pytest.mark.parametrize(
    ("msgs", "budget", "expected"),
    [
        ([u1, u2, u3], 3, [u1, u2, u3]),
        ([u1, u2, u3], 2, [u2, u3]),
        ([u1, u2, u3], 0, []),
        ([], 0, []),
        ([], -1, []),
        # The call and its two results go together, even if that undershoots the budget.
        ([u1, call("a"), result("a"), result("a2"), u2], 3, [u2]),
        ([u1, call("a"), result("a"), u2], 3, [call("a"), result("a"), u2]),
        ([result("orphan"), u1], 1, [u1]),
    ],
    ids=[
        "fits",
        "drop-oldest",
        "nothing-fits",
        "empty",
        "empty-negative-budget",
        "unit-dropped-whole",
        "unit-kept-whole",
        "leading-orphan",
    ],
)
def test_trim_to_budget(msgs: list[AgentMessage], budget: int, expected: list[AgentMessage]) -> None:
    assert trim_to_budget(msgs, budget, count) == expected


def test_trim_default_estimate_uses_the_dumped_json() -> None:
    long = UserMessage(content="x" * 4000)  # ~1000 tokens
    short = UserMessage(content="hi")
    assert trim_to_budget([long, short], 100) == [short]
    assert trim_to_budget([long, short], 5000) == [long, short]


_units = st.lists(
    st.sampled_from(["u", "a", "c"]).flatmap(
        lambda kind: (
            st.just([UserMessage(content="u")])
            if kind == "u"
            else st.just([AssistantMessage(content=[TextBlock(text="a")])])
            if kind == "a"
            else st.integers(1, 3).map(lambda k: [call("x")] + [result("x")] * k)
        )
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_units, st.integers(0, 30))
def test_trim_gives_the_longest_fitting_suffix_of_whole_units(units: list[list[AgentMessage]], budget: int) -> None:
    msgs = [m for unit in units for m in unit]
    weight = lambda ms: sum(1 + len(getattr(m, "content", [])) for m in ms)  # noqa: E731
    out = trim_to_budget(msgs, budget, weight)
    assert out == msgs[len(msgs) - len(out) :]
    assert weight(out) <= budget or not out
    cuts = [sum(len(u) for u in units[:i]) for i in range(len(units) + 1)]
    assert len(msgs) - len(out) in cuts  # cut at a unit boundary: no call split from its results
    shorter_cuts = [c for c in cuts if c < len(msgs) - len(out)]
    assert all(weight(msgs[c:]) > budget for c in shorter_cuts)  # nothing longer would fit
