"""core.messages.model: parse and dump over generated input (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.messages.model import (
    AssistantMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
    parse_messages,
)

# --- properties ------------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_keys = st.sampled_from(
    [
        "role",
        "content",
        "type",
        "text",
        "id",
        "name",
        "arguments",
        "input",
        "toolCallId",
        "toolUseId",
        "tool_call_id",
        "toolName",
        "isError",
        "timestamp",
        "stopReason",
        "tool_calls",
        "function",
        "data",
    ]
)
_roles = st.sampled_from(["user", "assistant", "toolResult", "tool", "tool_result", "system", "x"])
_blocks = st.dictionaries(_keys, _json, max_size=4).map(lambda d: d | {"type": d.get("type")}) | st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "toolCall", "toolUse", "functionCall", "tool_result", "image", "thinking"])},
    optional={"text": _json, "id": _json, "name": _json, "arguments": _json, "input": _json, "content": _json},
)
_raw_messages = st.lists(
    st.fixed_dictionaries(
        {"role": _roles},
        optional={
            "content": _json | st.lists(_blocks, max_size=3),
            "toolCallId": _json,
            "timestamp": _json,
            "tool_calls": _json,
            "toolName": _json,
            "isError": _json,
        },
    )
    | st.dictionaries(_keys, _json, max_size=4),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(_raw_messages)
def test_parse_never_raises_on_lists_of_objects(raw: list[dict[str, Any]]) -> None:
    msgs = parse_messages(raw)
    # Whatever survived is well-typed and dumps to JSON-able builtins.
    assert all(isinstance(m, (UserMessage, AssistantMessage, ToolResultMessage)) for m in msgs)
    assert parse_messages(dump_messages(msgs)) == msgs


_text = st.text(alphabet="ab \n", max_size=6)
_user_blocks = st.lists(
    st.builds(TextBlock, text=_text) | st.builds(ImageBlock, data=st.none() | _text, mimeType=st.just("image/png")),
    max_size=3,
)
_asst_blocks = st.lists(
    st.builds(TextBlock, text=_text)
    | st.builds(ThinkingBlock, thinking=_text)
    | st.builds(
        ToolCallBlock,
        id=st.text(alphabet="xyz", min_size=1, max_size=3),
        name=st.sampled_from(["", "bash"]),
        arguments=st.dictionaries(st.text(max_size=3), _json_scalars, max_size=2),
    ),
    max_size=3,
)
_typed_messages = st.lists(
    st.builds(UserMessage, content=_text | _user_blocks, timestamp=st.none() | st.integers(0, 2**40))
    | st.builds(AssistantMessage, content=_asst_blocks, stopReason=st.none() | st.sampled_from(["stop", "error"]))
    | st.builds(
        ToolResultMessage,
        toolCallId=st.text(alphabet="xyz", min_size=1, max_size=3),
        toolName=st.sampled_from(["", "bash"]),
        content=_user_blocks,
        isError=st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(_typed_messages)
def test_dump_then_parse_round_trips(msgs: list[Any]) -> None:
    assert parse_messages(dump_messages(msgs)) == msgs
