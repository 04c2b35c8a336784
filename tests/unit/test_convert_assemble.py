"""core.messages.convert, the assemble side: OV records to AgentMessages (trimming to a budget:
test_trim_to_budget.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from core.messages.convert import (
    INTERRUPTED_TEXT,
    NO_OUTPUT_TEXT,
    archive_summary_message,
    merge_consecutive_assistants,
    ov_to_agent_messages,
    turn_to_ov_messages,
)
from core.messages.model import (
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
)
from core.ov.messages import OtherPart, OVMessage, to_records
from tests.helpers.transcripts import text_msg, tool_part
from workers.rpc.tools.archive import format_ov_message

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
        "user texts join with a newline; empty records and empty abstracts give nothing",
        [
            {
                "role": "user",
                "parts": [
                    {"type": "text", "text": "a"},
                    {"type": "context", "abstract": ""},
                    {"type": "context", "abstract": "b"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {"role": "assistant", "parts": []},
            {"role": "user"},
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
    assert dump_messages(ov_to_agent_messages(to_records(records))) == expected


@pytest.mark.parametrize(
    "records",
    [["not a record"], [{"role": "user", "parts": ["junk"]}], [{"role": "user", "parts": [{"type": 7, "text": 1}]}]],
    ids=["not-an-object", "part-not-an-object", "part-kind-not-a-string"],
)
def test_records_of_another_shape_fail_where_they_come_in(records: list[Any]) -> None:
    # Strict at the edge (OV's answer, a stored snapshot), so nothing past it checks shapes.
    with pytest.raises(msgspec.ValidationError):
        to_records(records)


def test_a_part_of_an_unknown_kind_is_kept_typed_and_shown_as_the_reference_shows_it() -> None:
    # A later OV may add a part kind: one such part must not fail the whole archive or session.
    records = to_records(
        [
            {"role": "assistant", "parts": [{"type": "text", "text": "before"}, {"type": "custom", "data": "value"}]},
            {"role": "user", "parts": [{"type": "text", "text": "next"}]},
        ]
    )
    other = records[0].parts[1]
    assert isinstance(other, OtherPart) and other.kind == "custom"
    assert other.rendered == '[custom]: {"type":"custom","data":"value"}'
    # it survives the snapshot's round trip (encoded as an "other" part, decoded back)
    assert msgspec.json.decode(msgspec.json.encode(records), type=list[OVMessage]) == records
    assert dump_messages(ov_to_agent_messages(records)) == [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "before"}, {"type": "text", "text": other.rendered}],
        },
        {"role": "user", "content": "next"},
    ]
    assert format_ov_message(records[0]) == '[assistant]:\nbefore\n\n[custom]: {"type":"custom","data":"value"}'


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
