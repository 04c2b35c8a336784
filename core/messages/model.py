"""OpenClaw's AgentMessage as typed msgspec structs, and the JSON seam to them.

Field names are camelCase exactly as OpenClaw (pi-ai) writes them, so a struct
dumps to the JSON OpenClaw expects. ``parse_messages`` is deliberately
forgiving: transcripts from the wild carry provider-specific aliases, custom
roles and half-written blocks, and assemble must never fail on them. It only
raises ``MessageFormatError`` when the input is not a list of objects at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from core.messages.canonical import canonicalize_agent_messages, normalize_assistant_content

_STRUCT_OPTS: dict[str, Any] = {"kw_only": True, "frozen": True}


class MessageFormatError(ValueError):
    """Input that is not a list of JSON objects."""


# --- content blocks ------------------------------------------------------------


class TextBlock(msgspec.Struct, tag_field="type", tag="text", **_STRUCT_OPTS):
    text: str
    textSignature: str | None = None
    """OpenAI Responses message id; carried so a replay keeps it."""


class ImageBlock(msgspec.Struct, tag_field="type", tag="image", **_STRUCT_OPTS):
    data: str | None = None
    """Base64 image bytes."""
    mimeType: str | None = None


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", **_STRUCT_OPTS):
    thinking: str
    thinkingSignature: str | None = None
    redacted: bool | None = None


class ToolCallBlock(msgspec.Struct, tag_field="type", tag="toolCall", **_STRUCT_OPTS):
    id: str
    name: str = ""
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    thoughtSignature: str | None = None
    """Google's opaque signature; carried so a replay keeps it."""


UserBlock = TextBlock | ImageBlock
AssistantBlock = TextBlock | ThinkingBlock | ToolCallBlock

# --- messages --------------------------------------------------------------------


class UserMessage(msgspec.Struct, tag_field="role", tag="user", **_STRUCT_OPTS):
    content: str | list[UserBlock]
    timestamp: int | float | None = None


class AssistantMessage(msgspec.Struct, tag_field="role", tag="assistant", **_STRUCT_OPTS):
    content: list[AssistantBlock] = msgspec.field(default_factory=list)
    stopReason: str | None = None
    timestamp: int | float | None = None
    # Passthrough: OpenClaw keeps these on every assistant turn; we never read them.
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    errorMessage: str | None = None
    responseId: str | None = None


class ToolResultMessage(msgspec.Struct, tag_field="role", tag="toolResult", **_STRUCT_OPTS):
    toolCallId: str
    toolName: str = ""
    content: list[UserBlock] = msgspec.field(default_factory=list)
    isError: bool = False
    details: Any = None
    """Tool-specific extra data OpenClaw keeps for its UI; never sent to a model."""
    timestamp: int | float | None = None


AgentMessage = UserMessage | AssistantMessage | ToolResultMessage

# --- parsing ---------------------------------------------------------------------

_NUMBER = (int, float)

# Optional scalar fields per role and the types accepted for them; a value of
# another type is dropped instead of failing the whole message.
_OPTIONAL_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "user": {"timestamp": _NUMBER},
    "assistant": {
        "stopReason": (str,),
        "timestamp": _NUMBER,
        "api": (str,),
        "provider": (str,),
        "model": (str,),
        "usage": (dict,),
        "errorMessage": (str,),
        "responseId": (str,),
    },
    "toolResult": {"timestamp": _NUMBER},
}

_BLOCK_TYPES: dict[str, dict[str, type]] = {
    "user": {"text": TextBlock, "image": ImageBlock},
    "toolResult": {"text": TextBlock, "image": ImageBlock},
    "assistant": {"text": TextBlock, "thinking": ThinkingBlock, "toolCall": ToolCallBlock},
}


def _accepts(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int in Python but never a valid timestamp or count here.
    return isinstance(value, types) and not isinstance(value, bool)


def _optional_fields(raw: dict[str, Any], role: str) -> dict[str, Any]:
    return {
        name: raw[name]
        for name, types in _OPTIONAL_FIELDS[role].items()
        if raw.get(name) is not None and _accepts(raw[name], types)
    }


def _blocks(items: list[Any], role: str) -> list[Any]:
    """Typed blocks of a content list; unknown or malformed blocks are dropped."""
    allowed = _BLOCK_TYPES[role]
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = allowed.get(item["type"]) if isinstance(item.get("type"), str) else None
        if kind is None:
            continue
        try:
            block: Any = msgspec.convert(item, kind)
        except msgspec.ValidationError:
            continue
        # A call without an id can never be paired with its result.
        if isinstance(block, ToolCallBlock) and not block.id:
            continue
        out.append(block)
    return out


def _parse_one(raw: dict[str, Any]) -> AgentMessage | None:
    role = raw.get("role")
    content = raw.get("content")
    if role == "user":
        if isinstance(content, str):
            return UserMessage(content=content, **_optional_fields(raw, "user"))
        if isinstance(content, list):
            return UserMessage(content=_blocks(content, "user"), **_optional_fields(raw, "user"))
        return None
    if role == "assistant":
        if content is None:
            content = []
        if not isinstance(content, list):
            return None
        return AssistantMessage(content=_blocks(content, "assistant"), **_optional_fields(raw, "assistant"))
    if role == "toolResult":
        call_id = raw.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            return None
        if content is None:
            content = []
        if not isinstance(content, list):
            return None
        name = raw.get("toolName")
        is_error = raw.get("isError")
        return ToolResultMessage(
            toolCallId=call_id,
            toolName=name if isinstance(name, str) else "",
            content=_blocks(content, "toolResult"),
            isError=is_error if isinstance(is_error, bool) else False,
            details=raw.get("details"),
            **_optional_fields(raw, "toolResult"),
        )
    # system, custom OpenClaw roles, anything else: not ours to replay.
    return None


def parse_messages(raw: Any) -> list[AgentMessage]:
    """Typed messages from OpenClaw JSON, after alias normalisation.

    Unknown roles are skipped, unknown or malformed blocks dropped, and a
    message whose required fields are unusable (user content neither string
    nor list, toolResult without toolCallId) skipped.
    """
    if not isinstance(raw, (list, tuple)):
        raise MessageFormatError(f"messages must be a list, not {type(raw).__name__}")
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MessageFormatError(f"messages[{index}] must be an object, not {type(item).__name__}")
    canonical = canonicalize_agent_messages(normalize_assistant_content(list(raw)))
    return [msg for msg in map(_parse_one, canonical) if msg is not None]


# --- dumping ---------------------------------------------------------------------


def _without_none(obj: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if value is not None}


def dump_message(msg: AgentMessage) -> dict[str, Any]:
    """One message as OpenClaw JSON; None fields left out, nested data untouched."""
    out = _without_none(msgspec.to_builtins(msg))
    if isinstance(out.get("content"), list):
        out["content"] = [_without_none(block) for block in out["content"]]
    return out


def dump_messages(msgs: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    return [dump_message(msg) for msg in msgs]


def text_of(msg: AgentMessage) -> str:
    """The message's text blocks joined by newlines (a string content as is)."""
    if isinstance(msg.content, str):
        return msg.content
    return "\n".join(block.text for block in msg.content if isinstance(block, TextBlock) and block.text)
