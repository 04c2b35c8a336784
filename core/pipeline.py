"""The seed's five message post-processing steps, as pure functions.

Assemble runs them over every context it returns, in this order:

1. ``normalize_assistant_content`` and 2. ``canonicalize_agent_messages`` work
   on raw OpenClaw JSON dicts, so provider aliases decode into our structs.
3. ``sanitize_tool_use_result_pairing``, 4. ``merge_consecutive_users`` and
   5. ``ensure_alternation`` work on typed messages and repair what strict
   providers (Anthropic, Bedrock, Gemini) reject.

Behaviour follows the reference plugin (session-transcript-repair.ts and
context-message-adapter.ts); where we go further it says so below.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from core.messages import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    parse_messages,
)

MISSING_TOOL_RESULT_TEXT = (
    "[openclaw] missing tool result in session history; "
    "inserted synthetic error result for transcript repair."
)
"""Text of the synthetic error result given to a call that has none (OpenClaw's wording)."""

NO_CONTENT_TEXT = "(no content)"
"""Placeholder user text inserted between two adjacent assistant messages."""

UNKNOWN_TOOL_NAME = "unknown"

_CALL_ALIASES = frozenset({"toolUse", "functionCall", "tool_call", "tool_use", "function_call"})
_TOOL_RESULT_ROLES = frozenset({"tool", "tool_result"})
_ERRORED_STOP_REASONS = frozenset({"error", "aborted"})

# --- 1 and 2: raw dicts ----------------------------------------------------------------


def normalize_assistant_content(raw: Sequence[Any]) -> list[Any]:
    """Assistant string content becomes one text block; nothing else changes."""
    out: list[Any] = []
    for msg in raw:
        if isinstance(msg, Mapping) and msg.get("role") == "assistant" and isinstance(
            msg.get("content"), str
        ):
            msg = {**msg, "content": [{"type": "text", "text": msg["content"]}]}
        out.append(msg)
    return out


def _first_present(rec: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if rec.get(key) is not None:
            return rec[key]
    return None


def _first_text(rec: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = rec.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _arguments(value: Any) -> dict[str, Any]:
    """Call arguments as a dict: JSON strings parsed, anything unusable -> {}.

    Providers reject non-object arguments, and a truncated JSON string cannot
    be repaired, so an empty object is the one safe replay.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


def _canonical_call(block: Mapping[str, Any]) -> dict[str, Any]:
    if block.get("type") == "toolCall":
        out = dict(block)
    else:
        out = {"type": "toolCall", "id": _first_text(block, "id", "toolCallId", "toolUseId")}
        for key in ("name", "thoughtSignature"):
            if key in block:
                out[key] = block[key]
    out["arguments"] = _arguments(
        _first_present(block, "arguments", "input", "args", "toolInput")
    )
    return out


def _openai_calls(tool_calls: Any) -> list[dict[str, Any]]:
    """OpenAI chat's message-level ``tool_calls`` as toolCall blocks."""
    out: list[dict[str, Any]] = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if not isinstance(call, Mapping):
            continue
        fn = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        out.append(
            {
                "type": "toolCall",
                "id": call.get("id"),
                "name": fn.get("name", call.get("name")),
                "arguments": _arguments(_first_present(fn, "arguments") or call.get("arguments")),
            }
        )
    return out


def _is_call_type(kind: Any) -> bool:
    return kind == "toolCall" or (isinstance(kind, str) and kind in _CALL_ALIASES)


def _canonical_assistant(msg: Mapping[str, Any]) -> dict[str, Any]:
    content = msg.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    elif content is None and "tool_calls" in msg:
        content = []
    if isinstance(content, list):
        content = [
            _canonical_call(block)
            if isinstance(block, Mapping)
            and _is_call_type(block.get("type"))
            else block
            for block in content
        ] + _openai_calls(msg.get("tool_calls"))
    out = {k: v for k, v in msg.items() if k != "tool_calls"}
    out["content"] = content
    return out


def _canonical_tool_result(msg: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(msg)
    out["role"] = "toolResult"
    call_id = _first_text(msg, "toolCallId", "toolUseId", "tool_call_id", "tool_use_id")
    if call_id:
        out["toolCallId"] = call_id
    name = _first_present(msg, "toolName", "name")
    if isinstance(name, str) and name.strip():
        out["toolName"] = name.strip()
    if isinstance(msg.get("content"), str):
        out["content"] = [{"type": "text", "text": msg["content"]}]
    return out


def _split_anthropic_tool_results(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A user message carrying Anthropic ``tool_result`` blocks -> toolResult messages first.

    The reference hoists such blocks to the front of the user content; our
    user content cannot hold them, so they become toolResult messages placed
    before the user's remaining blocks, where pairing repair can see them.
    """
    content = msg.get("content")
    if not isinstance(content, list) or not any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
    ):
        return [dict(msg)]
    results: list[dict[str, Any]] = []
    rest: list[Any] = []
    for block in content:
        if not (isinstance(block, Mapping) and block.get("type") == "tool_result"):
            rest.append(block)
            continue
        inner = block.get("content")
        results.append(
            _canonical_tool_result(
                {
                    "role": "toolResult",
                    "toolCallId": _first_text(block, "tool_use_id", "toolUseId", "toolCallId"),
                    "content": inner if isinstance(inner, (str, list)) else [],
                    "isError": block.get("is_error") is True,
                }
            )
        )
    return results + ([{**msg, "content": rest}] if rest else [])


def canonicalize_agent_messages(raw: Sequence[Any]) -> list[Any]:
    """Provider aliases rewritten to OpenClaw's canonical shapes (raw dicts in and out).

    - blocks toolUse / functionCall / tool_call / tool_use / function_call ->
      toolCall; id from id / toolCallId / toolUseId; arguments from arguments /
      input / args / toolInput, JSON strings parsed; OpenAI ``tool_calls`` too.
    - roles tool / tool_result -> toolResult (the reference knows only
      toolResult; the aliases are ours); toolUseId / tool_call_id /
      tool_use_id -> toolCallId; string content -> one text block.
    - Anthropic tool_result blocks inside user content -> toolResult messages.
    """
    out: list[Any] = []
    for msg in raw:
        if not isinstance(msg, Mapping):
            out.append(msg)
            continue
        role = msg.get("role")
        if role == "assistant":
            out.append(_canonical_assistant(msg))
        elif role == "toolResult" or (isinstance(role, str) and role in _TOOL_RESULT_ROLES):
            out.append(_canonical_tool_result(msg))
        elif role == "user":
            out.extend(_split_anthropic_tool_results(msg))
        else:
            out.append(msg)
    return out


# --- 3: tool call / result pairing ----------------------------------------------------


def _calls(msg: AssistantMessage) -> list[ToolCallBlock]:
    return [block for block in msg.content if isinstance(block, ToolCallBlock) and block.id]


def _missing_result(call: ToolCallBlock, assistant: AssistantMessage) -> ToolResultMessage:
    # The assistant's timestamp, not the clock: the pipeline stays pure and idempotent.
    return ToolResultMessage(
        toolCallId=call.id,
        toolName=call.name.strip() or UNKNOWN_TOOL_NAME,
        content=[TextBlock(text=MISSING_TOOL_RESULT_TEXT)],
        isError=True,
        timestamp=assistant.timestamp,
    )


def _named(result: ToolResultMessage, call: ToolCallBlock) -> ToolResultMessage:
    name = result.toolName.strip() or call.name.strip() or UNKNOWN_TOOL_NAME
    return result if name == result.toolName else msgspec.structs.replace(result, toolName=name)


def sanitize_tool_use_result_pairing(msgs: Sequence[AgentMessage]) -> list[AgentMessage]:
    """Each assistant's calls are followed at once by exactly one result each, in call order.

    A result is looked for between its assistant and the next assistant; one
    found there moves up, the user messages in between follow the results.
    A call with no result gets a synthetic error result (the reference's
    choice, not "drop the call"). Results matching no call of the preceding
    assistant (orphans) and second results for an id (duplicates, anywhere)
    are dropped. Assistants that stopped with "error" or "aborted" get no
    synthetic results and lose their results, as in the reference; their
    calls stay in their content.
    """
    out: list[AgentMessage] = []
    seen_result_ids: set[str] = set()
    i = 0
    while i < len(msgs):
        msg = msgs[i]
        i += 1
        if isinstance(msg, ToolResultMessage):
            continue  # free-floating result: no assistant call precedes it
        calls = _calls(msg) if isinstance(msg, AssistantMessage) else []
        if not isinstance(msg, AssistantMessage) or not calls:
            out.append(msg)
            continue
        calls_by_id = {call.id: call for call in reversed(calls)}
        found: dict[str, ToolResultMessage] = {}
        between: list[AgentMessage] = []
        while i < len(msgs) and not isinstance(msgs[i], AssistantMessage):
            nxt = msgs[i]
            i += 1
            if isinstance(nxt, ToolResultMessage):
                call = calls_by_id.get(nxt.toolCallId)
                if call and nxt.toolCallId not in seen_result_ids:
                    found.setdefault(nxt.toolCallId, _named(nxt, call))
                continue
            between.append(nxt)
        out.append(msg)
        if msg.stopReason not in _ERRORED_STOP_REASONS:
            for call in calls:
                if call.id in seen_result_ids:
                    continue
                seen_result_ids.add(call.id)
                out.append(found[call.id] if call.id in found else _missing_result(call, msg))
        out.extend(between)
    return out


# --- 4 and 5: roles -------------------------------------------------------------------


def _user_blocks(msg: UserMessage) -> list[Any]:
    return [TextBlock(text=msg.content)] if isinstance(msg.content, str) else list(msg.content)


def merge_consecutive_users(msgs: Sequence[AgentMessage]) -> list[AgentMessage]:
    """Adjacent user messages become one: content blocks concatenated in order.

    A string content becomes a text block first (as in the reference); the
    first message's other fields (timestamp) are kept. Tool results never sit
    inside user content here (canonicalize split them out), so the reference's
    hoisting of tool_result blocks has nothing left to do.
    """
    out: list[AgentMessage] = []
    for msg in msgs:
        prev = out[-1] if out else None
        if isinstance(msg, UserMessage) and isinstance(prev, UserMessage):
            out[-1] = msgspec.structs.replace(
                prev, content=_user_blocks(prev) + _user_blocks(msg)
            )
        else:
            out.append(msg)
    return out


def ensure_alternation(msgs: Sequence[AgentMessage]) -> list[AgentMessage]:
    """A placeholder user message between two directly adjacent assistant messages.

    A toolResult between two assistants separates them (as in the reference):
    providers fold results into the user side of the conversation.
    """
    out: list[AgentMessage] = []
    for msg in msgs:
        if isinstance(msg, AssistantMessage) and out and isinstance(out[-1], AssistantMessage):
            out.append(UserMessage(content=NO_CONTENT_TEXT))
        out.append(msg)
    return out


def run_pipeline(msgs: Sequence[AgentMessage | Mapping[str, Any]]) -> list[AgentMessage]:
    """All five steps in order; raw dicts are normalised, canonicalised and typed first."""
    typed: list[AgentMessage] = []
    for msg in msgs:
        if isinstance(msg, Mapping):
            typed.extend(parse_messages([dict(msg)]))
        else:
            typed.append(msg)
    return ensure_alternation(merge_consecutive_users(sanitize_tool_use_result_pairing(typed)))
