"""Steps 1 and 2 of the seed's message pipeline: raw OpenClaw JSON to canonical dicts.

``normalize_assistant_content`` and ``canonicalize_agent_messages`` work on raw
dicts, before typing, so provider aliases (OpenAI ``tool_calls``, Anthropic
``tool_use`` / ``tool_result`` blocks, ...) decode into our structs. They import
nothing from the typed model, which parses their output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_CALL_ALIASES = frozenset({"toolUse", "functionCall", "tool_call", "tool_use", "function_call"})
_TOOL_RESULT_ROLES = frozenset({"tool", "tool_result"})

# --- 1 and 2: raw dicts ----------------------------------------------------------------


def normalize_assistant_content(raw: Sequence[Any]) -> list[Any]:
    """Assistant string content becomes one text block; nothing else changes."""
    out: list[Any] = []
    for msg in raw:
        if isinstance(msg, Mapping) and msg.get("role") == "assistant" and isinstance(msg.get("content"), str):
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
    out["arguments"] = _arguments(_first_present(block, "arguments", "input", "args", "toolInput"))
    return out


def _openai_calls(tool_calls: Any) -> list[dict[str, Any]]:
    """OpenAI chat's message-level ``tool_calls`` as toolCall blocks."""
    out: list[dict[str, Any]] = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        fn: Mapping[str, Any] = function if isinstance(function, Mapping) else {}
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
            _canonical_call(block) if isinstance(block, Mapping) and _is_call_type(block.get("type")) else block
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
