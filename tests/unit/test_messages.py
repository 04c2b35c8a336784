"""Typed AgentMessage: tolerant parsing of OpenClaw JSON, dumping, text extraction."""

from __future__ import annotations

from typing import Any

import pytest

from core.messages.model import (
    AssistantMessage,
    ImageBlock,
    MessageFormatError,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
    parse_messages,
    text_of,
)

PARSE_CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = [
    (
        "user string content kept as string",
        [{"role": "user", "content": "hello", "timestamp": 1700000000000}],
        [{"role": "user", "content": "hello", "timestamp": 1700000000000}],
    ),
    (
        "user blocks: text and image kept, unknown block dropped",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "data": "QUJD", "mimeType": "image/png"},
                    {"type": "audio", "data": "zzz"},
                ],
            }
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "data": "QUJD", "mimeType": "image/png"},
                ],
            }
        ],
    ),
    (
        "assistant string content becomes one text block",
        [{"role": "assistant", "content": "hi there"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "hi there"}]}],
    ),
    (
        "system and custom roles are skipped",
        [
            {"role": "system", "content": "be nice"},
            {"role": "bashExecution", "command": "ls"},
            {"content": "no role"},
            {"role": "user", "content": "kept"},
        ],
        [{"role": "user", "content": "kept"}],
    ),
    (
        "toolUse with input becomes toolCall with arguments",
        [{"role": "assistant", "content": [{"type": "toolUse", "id": "t1", "name": "grep", "input": {"q": "x"}}]}],
        [
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "t1", "name": "grep", "arguments": {"q": "x"}}],
            }
        ],
    ),
    (
        "functionCall with JSON-string arguments is parsed",
        [
            {
                "role": "assistant",
                "content": [{"type": "functionCall", "id": "t2", "name": "read", "arguments": '{"path": "a.ts"}'}],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "t2", "name": "read", "arguments": {"path": "a.ts"}}],
            }
        ],
    ),
    (
        "tool_use with toolUseId and args; unparsable argument string becomes {}",
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "toolUseId": "t3", "name": "a", "args": {"k": 1}},
                    {"type": "tool_call", "id": "t4", "name": "b", "arguments": '{"broken'},
                ],
            }
        ],
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "t3", "name": "a", "arguments": {"k": 1}},
                    {"type": "toolCall", "id": "t4", "name": "b", "arguments": {}},
                ],
            }
        ],
    ),
    (
        "a toolCall without an id is dropped: it can never be paired",
        [
            {
                "role": "assistant",
                "content": [{"type": "toolUse", "name": "x", "input": {}}, {"type": "text", "text": "t"}],
            }
        ],
        [{"role": "assistant", "content": [{"type": "text", "text": "t"}]}],
    ),
    (
        "toolResult: toolUseId -> toolCallId, name trimmed, string content -> block",
        [{"role": "toolResult", "toolUseId": "t1", "toolName": " grep ", "content": "found", "isError": True}],
        [
            {
                "role": "toolResult",
                "toolCallId": "t1",
                "toolName": "grep",
                "content": [{"type": "text", "text": "found"}],
                "isError": True,
            }
        ],
    ),
    (
        "OpenAI style: assistant tool_calls and role tool",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"d": "/"}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "bin etc"},
        ],
        [
            {"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "ls", "arguments": {"d": "/"}}]},
            {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "",
                "content": [{"type": "text", "text": "bin etc"}],
                "isError": False,
            },
        ],
    ),
    (
        "Anthropic tool_result blocks in user content become toolResult messages first",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and now"},
                    {"type": "tool_result", "tool_use_id": "tu1", "content": "data", "is_error": True},
                ],
            }
        ],
        [
            {
                "role": "toolResult",
                "toolCallId": "tu1",
                "toolName": "",
                "content": [{"type": "text", "text": "data"}],
                "isError": True,
            },
            {"role": "user", "content": [{"type": "text", "text": "and now"}]},
        ],
    ),
    (
        "toolResult without any call id is skipped",
        [{"role": "toolResult", "toolName": "bash", "content": "x"}],
        [],
    ),
    (
        "fields of the wrong type are dropped, the message kept",
        [
            {"role": "user", "content": "a", "timestamp": "yesterday"},
            {"role": "user", "content": "b", "timestamp": True},
            {"role": "assistant", "content": [], "stopReason": 3, "model": "m1"},
        ],
        [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": [], "model": "m1"},
        ],
    ),
    (
        "malformed blocks dropped, unusable content skips the message",
        [
            {"role": "user", "content": [{"type": "text", "text": 5}, "loose", {"type": "text", "text": "ok"}]},
            {"role": "user", "content": 42},
            {"role": "user"},
            {"role": "assistant", "content": {"oops": 1}},
        ],
        [{"role": "user", "content": [{"type": "text", "text": "ok"}]}],
    ),
    (
        "assistant passthrough fields survive, unknown fields are ignored",
        [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"}],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude",
                "usage": {"input": 1, "output": 2},
                "stopReason": "stop",
                "errorMessage": "none",
                "timestamp": 5,
                "somethingNew": {"x": 1},
            }
        ],
        [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"}],
                "stopReason": "stop",
                "timestamp": 5,
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude",
                "usage": {"input": 1, "output": 2},
                "errorMessage": "none",
            }
        ],
    ),
    (
        "image block in assistant content and thinking in user content are dropped",
        [
            {"role": "assistant", "content": [{"type": "image", "data": "x"}, {"type": "text", "text": "a"}]},
            {"role": "user", "content": [{"type": "thinking", "thinking": "t"}]},
        ],
        [
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            {"role": "user", "content": []},
        ],
    ),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES])
def test_parse_then_dump(raw: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert dump_messages(parse_messages(raw)) == expected


def test_parse_does_not_mutate_its_input() -> None:
    raw = [
        {"role": "assistant", "content": "text"},
        {"role": "assistant", "content": [{"type": "toolUse", "id": "t", "name": "n", "input": '{"a":1}'}]},
        {"role": "tool", "tool_call_id": "t", "content": "r"},
    ]
    snapshot = repr(raw)
    parse_messages(raw)
    assert repr(raw) == snapshot


@pytest.mark.parametrize(
    "bad",
    [None, {"role": "user", "content": "x"}, "messages", 3, [{"role": "user"}, "oops"], [None]],
    ids=["none", "dict", "string", "int", "list-with-string", "list-with-none"],
)
def test_input_that_is_not_a_list_of_objects_raises(bad: Any) -> None:
    with pytest.raises(MessageFormatError):
        parse_messages(bad)


def test_types_of_parsed_messages() -> None:
    msgs = parse_messages(
        [
            {"role": "user", "content": [{"type": "image", "mimeType": "image/png"}]},
            {"role": "assistant", "content": [{"type": "toolCall", "id": "a", "name": "n", "arguments": {}}]},
            {"role": "toolResult", "toolCallId": "a", "toolName": "n", "content": []},
        ]
    )
    assert msgs == [
        UserMessage(content=[ImageBlock(mimeType="image/png")]),
        AssistantMessage(content=[ToolCallBlock(id="a", name="n", arguments={})]),
        ToolResultMessage(toolCallId="a", toolName="n"),
    ]


def test_dump_omits_none_fields_but_keeps_false_and_nested_nulls() -> None:
    msgs = [
        ToolResultMessage(toolCallId="a", toolName="n", content=[TextBlock(text="r")]),
        AssistantMessage(content=[ToolCallBlock(id="a", name="n", arguments={"opt": None})]),
    ]
    assert dump_messages(msgs) == [
        {
            "role": "toolResult",
            "toolCallId": "a",
            "toolName": "n",
            "content": [{"type": "text", "text": "r"}],
            "isError": False,
        },
        {"role": "assistant", "content": [{"type": "toolCall", "id": "a", "name": "n", "arguments": {"opt": None}}]},
    ]


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (UserMessage(content="plain"), "plain"),
        (UserMessage(content=[TextBlock(text="a"), ImageBlock(data="x"), TextBlock(text="b")]), "a\nb"),
        (UserMessage(content=[]), ""),
        (
            AssistantMessage(
                content=[ThinkingBlock(thinking="secret"), TextBlock(text="shown"), ToolCallBlock(id="t", name="n")]
            ),
            "shown",
        ),
        (ToolResultMessage(toolCallId="t", content=[TextBlock(text="out"), TextBlock(text="")]), "out"),
    ],
    ids=["string", "blocks", "empty", "assistant-skips-thinking-and-calls", "tool-result-skips-empty"],
)
def test_text_of(msg: Any, expected: str) -> None:
    assert text_of(msg) == expected
