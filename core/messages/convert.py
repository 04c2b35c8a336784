"""The two conversions between OpenClaw transcripts and OpenViking sessions (pure).

Capture (afterTurn): ``turn_to_ov_messages`` turns one turn of OpenClaw
AgentMessage JSON into OV 0.5.2 message bodies. Assemble: ``ov_to_agent_messages``
turns OV /context records back into typed AgentMessages, ``trim_to_budget``
drops the oldest of them while over budget, and ``archive_summary_message``
wraps the archive overview. Behaviour follows the reference plugin
(text-utils.ts extractNewTurnMessages, context-lifecycle-service.ts,
context-message-adapter.ts convertToAgentMessages).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from core.messages.canonical import canonicalize_agent_messages, normalize_assistant_content
from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
)
from core.messages.tokens import compact_json, estimate_message_tokens
from core.ov.messages import ContextPart, OtherPart, OVMessage, TextPart, ToolPart, text_message
from core.recall.text import sanitize_capture_text

ARCHIVE_SUMMARY_HEADER = "[Session History Summary]"
NO_OUTPUT_TEXT = "(no output)"
INTERRUPTED_TEXT = "(interrupted — tool did not complete)"
DEFAULT_CAPTURE_TOOL_NAME = "tool"
"""tool_name captured for a toolResult that names no tool."""
UNKNOWN_TOOL_NAME = "unknown"
"""Tool name replayed for an OV tool part that names none."""

_SECONDS_LIMIT = 1e11
"""Timestamps below this (in magnitude) are seconds, others milliseconds (year ~5138 cut-off)."""
_FINISHED_STATUSES = frozenset({"completed", "error"})


# --- capture: OpenClaw -> OV ----------------------------------------------------------


def _capture_start(pre_prompt_message_count: Any) -> int:
    valid = isinstance(pre_prompt_message_count, int) and not isinstance(pre_prompt_message_count, bool)
    return pre_prompt_message_count if valid and pre_prompt_message_count >= 0 else 0


def _iso_utc(value: Any) -> str | None:
    """ISO-8601 UTC of a numeric seconds-or-milliseconds timestamp, like JS toISOString."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    millis = value * 1000 if abs(value) < _SECONDS_LIMIT else value
    try:
        moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _latest_created_at(turn: Sequence[Any]) -> str | None:
    # One time for the whole turn, as the reference sends: the newest message's.
    for msg in reversed(turn):
        if not isinstance(msg, Mapping) or not msg.get("role") or msg.get("role") == "system":
            continue
        created_at = _iso_utc(msg.get("timestamp"))
        if created_at:
            return created_at
    return None


def _tool_inputs(canonical: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Arguments of every assistant toolCall, by call id."""
    inputs: dict[str, dict[str, Any]] = {}
    for msg in canonical:
        if not isinstance(msg, Mapping) or msg.get("role") != "assistant":
            continue
        content = msg.get("content")
        for block in content if isinstance(content, list) else []:
            if (
                isinstance(block, Mapping)
                and block.get("type") == "toolCall"
                and isinstance(block.get("id"), str)
                and block["id"]
                and isinstance(block.get("arguments"), Mapping)
            ):
                inputs[block["id"]] = dict(block["arguments"])
    return inputs


def _block_texts(content: list[Any]) -> list[str]:
    return [
        block["text"].strip()
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]


def content_text(content: Any) -> str:
    """A message's content as text: a string as is, the text blocks of a list, other JSON compact."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(_block_texts(content))
    if content is None:
        return ""
    return compact_json(content)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return " ".join(_block_texts(content))
    return ""


def _tool_part(msg: Mapping[str, Any], inputs: Mapping[str, dict[str, Any]]) -> ToolPart | None:
    output = content_text(msg.get("content"))
    if not output:
        return None
    name = msg.get("toolName")
    raw_id = msg.get("toolCallId")
    call_id = raw_id if isinstance(raw_id, str) else ""
    tool_input = inputs.get(call_id) if call_id else None
    if tool_input is None and isinstance(msg.get("toolInput"), Mapping):
        tool_input = dict(msg["toolInput"])
    return ToolPart(
        tool_id=call_id,
        tool_name=name if isinstance(name, str) and name else DEFAULT_CAPTURE_TOOL_NAME,
        tool_input=tool_input,
        tool_output=output,
        tool_status="error" if msg.get("isError") is True else "completed",
    )


def _is_tool_only(message: OVMessage) -> bool:
    parts = message.parts
    return message.role == "assistant" and bool(parts) and all(isinstance(p, ToolPart) for p in parts)


def _coalesce_tool_messages(messages: list[OVMessage]) -> list[OVMessage]:
    """Adjacent all-tool assistant messages become one, so a tool burst is one OV message."""
    out: list[OVMessage] = []
    for message in messages:
        if out and _is_tool_only(message) and _is_tool_only(out[-1]):
            out[-1].parts.extend(message.parts)
        else:
            out.append(message)
    return out


def turn_to_ov_messages(messages: Sequence[Any], pre_prompt_message_count: Any, agent_id: str) -> list[OVMessage]:
    """OV message bodies for the messages OpenClaw added this turn.

    The turn is ``messages[pre_prompt_message_count:]`` (0 when missing or
    negative). System and role-less messages are skipped. A toolResult becomes
    an assistant message with one tool part whose input is the matching call's
    arguments from anywhere in ``messages``; results with empty output are
    dropped; adjacent tool-only messages are merged. Any other message becomes
    a text part (assistant stays assistant, every other role is user) of its
    sanitised text, dropped when empty; so assistant messages holding only
    calls produce nothing. Every message gets the turn's latest timestamp as
    ``created_at``; assistant messages get ``peer_id = agent_id``.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return []
    start = _capture_start(pre_prompt_message_count)
    turn = list(messages[start:])
    if not turn:
        return []
    inputs = _tool_inputs(canonicalize_agent_messages(normalize_assistant_content(messages)))
    out: list[OVMessage] = []
    for msg in canonicalize_agent_messages(turn):
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        if not isinstance(role, str) or not role or role == "system":
            continue
        if role == "toolResult":
            part = _tool_part(msg, inputs)
            if part:
                out.append(OVMessage(role="assistant", parts=[part]))
            continue
        text = sanitize_capture_text(_message_text(msg.get("content")))
        if text:
            out.append(text_message("assistant" if role == "assistant" else "user", text))
    created_at = _latest_created_at(turn)
    result = _coalesce_tool_messages(out)
    for message in result:
        if message.role == "assistant" and agent_id:
            message.peer_id = agent_id
        if created_at:
            message.created_at = created_at
    return result


# --- assemble: OV -> OpenClaw ----------------------------------------------------------


def _tool_arguments(tool_input: Any) -> dict[str, Any]:
    if isinstance(tool_input, str):
        try:
            tool_input = json.loads(tool_input)
        except ValueError:
            return {}
    return dict(tool_input) if isinstance(tool_input, Mapping) else {}


def _result_text(part: ToolPart, status: str) -> str:
    text = (part.tool_output or NO_OUTPUT_TEXT) if status in _FINISHED_STATUSES else INTERRUPTED_TEXT
    # OV may externalise a long output and keep only a reference to it.
    ref = part.tool_output_ref
    if ref and ref not in text:
        chars = part.tool_output_original_chars
        suffix = f" original_chars={chars}" if chars is not None else ""
        text += f"\n[tool-result-ref] {ref}{suffix}"
    return text


def _tool_as_text(part: ToolPart, name: str, status: str) -> str:
    lines = [f"[{name}] ({status})"]
    if part.tool_input is not None and part.tool_input != "":
        lines.append(f"Input: {compact_json(part.tool_input)}")
    if part.tool_output:
        lines.append(f"Output: {part.tool_output}")
    return "\n".join(lines)


def _record_to_messages(record: OVMessage) -> list[AgentMessage]:
    texts: list[TextBlock] = []
    calls: list[ToolCallBlock] = []
    results: list[ToolResultMessage] = []
    for part in record.parts:
        if isinstance(part, TextPart):
            texts.append(TextBlock(text=part.text))
        elif isinstance(part, ContextPart):
            if part.abstract:
                texts.append(TextBlock(text=part.abstract))
        elif isinstance(part, OtherPart):  # a kind OV 0.5.2 does not write: kept as text
            texts.append(TextBlock(text=part.rendered))
        elif isinstance(part, ToolPart):
            name = part.tool_name or UNKNOWN_TOOL_NAME
            status = part.tool_status or "unknown"
            if not part.tool_id:
                # Without an id no call/result pair can be built; keep what happened as text.
                texts.append(TextBlock(text=_tool_as_text(part, name, status)))
                continue
            calls.append(ToolCallBlock(id=part.tool_id, name=name, arguments=_tool_arguments(part.tool_input)))
            results.append(
                ToolResultMessage(
                    toolCallId=part.tool_id,
                    toolName=name,
                    content=[TextBlock(text=_result_text(part, status))],
                    isError=status == "error",
                )
            )
    out: list[AgentMessage] = []
    if record.role == "assistant":
        if texts or calls:
            out.append(AssistantMessage(content=[*texts, *calls]))
    elif texts:
        out.append(UserMessage(content="\n".join(block.text for block in texts)))
    if calls and record.role != "assistant":
        out.append(AssistantMessage(content=list(calls)))
    return out + results


def merge_consecutive_assistants(msgs: Sequence[AgentMessage]) -> list[AgentMessage]:
    """Adjacent assistant messages become one: content concatenated, first one's fields kept.

    OV stores an assistant's text and its tool parts as separate messages;
    merged back they make one assistant turn followed by its results.
    """
    out: list[AgentMessage] = []
    for msg in msgs:
        prev = out[-1] if out else None
        if isinstance(msg, AssistantMessage) and isinstance(prev, AssistantMessage):
            out[-1] = msgspec.structs.replace(prev, content=[*prev.content, *msg.content])
        else:
            out.append(msg)
    return out


def ov_to_agent_messages(records: Sequence[OVMessage]) -> list[AgentMessage]:
    """AgentMessages of OV /context records ``{id, role, parts, created_at}``.

    Text parts and context abstracts become text; a tool part with a tool_id
    becomes an assistant toolCall plus a toolResult ("(no output)" when empty,
    "(interrupted — tool did not complete)" unless completed/error, isError
    for "error"); a tool part without one becomes text. A user record's text
    blocks join into one string content; its tool parts become an assistant
    message, and a record with only tools gives no user message. Records with
    nothing usable give nothing (the reference emits empty content, which
    strict providers reject). Adjacent assistants are merged last.
    """
    out: list[AgentMessage] = []
    for record in records:
        out.extend(_record_to_messages(record))
    return merge_consecutive_assistants(out)


def archive_summary_message(overview: str) -> UserMessage:
    return UserMessage(content=f"{ARCHIVE_SUMMARY_HEADER}\n{overview}")


# --- budget ----------------------------------------------------------------------------


def _estimate_dumped(msgs: list[AgentMessage]) -> int:
    return estimate_message_tokens(dump_messages(msgs))


def _unit_starts(msgs: Sequence[AgentMessage]) -> list[int]:
    """Indexes where a droppable unit starts: a toolResult belongs to the unit before it."""
    return [i for i, msg in enumerate(msgs) if i == 0 or not isinstance(msg, ToolResultMessage)]


def trim_to_budget(
    msgs: Sequence[AgentMessage],
    budget_tokens: float,
    estimate: Callable[[list[AgentMessage]], float] | None = None,
) -> list[AgentMessage]:
    """The newest suffix of ``msgs`` whose estimate fits ``budget_tokens``.

    Messages go from the oldest end, an assistant always together with the
    toolResults right after it, so no call loses its result. May return [].
    ``estimate`` defaults to core.messages.tokens over the dumped JSON; it is only ever
    called on suffixes of ``msgs`` (callers may cache by suffix length) and
    must not grow when messages are dropped.
    """
    measure = estimate or _estimate_dumped
    msgs = list(msgs)
    if not msgs or measure(msgs) <= budget_tokens:
        return msgs
    starts = [*_unit_starts(msgs), len(msgs)]
    # Dropping messages never grows the estimate, so the first fitting cut is
    # found by bisection: O(log n) estimates instead of one per dropped message.
    lo, hi = 1, len(starts) - 1  # starts[hi] == len(msgs) always fits ([] -> 0)
    while lo < hi:
        mid = (lo + hi) // 2
        if measure(msgs[starts[mid] :]) <= budget_tokens:
            hi = mid
        else:
            lo = mid + 1
    return msgs[starts[lo] :]
