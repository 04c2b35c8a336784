"""Builders of transcripts for the message tests: typed OpenClaw messages (U, A, R, synthetic)
and OV message records (text_msg, tool_part)."""

from __future__ import annotations

from typing import Any

from core.messages.model import AssistantMessage, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage
from core.messages.pipeline import MISSING_TOOL_RESULT_TEXT


def U(content: Any = "u") -> UserMessage:
    return UserMessage(content=content)


def A(
    *calls: str, text: str | None = None, stop: str | None = None, names: dict[str, str] | None = None
) -> AssistantMessage:
    blocks: list[Any] = [TextBlock(text=text)] if text is not None else []
    blocks += [ToolCallBlock(id=c, name=(names or {}).get(c, "bash")) for c in calls]
    return AssistantMessage(content=blocks, stopReason=stop)


def R(call_id: str, out: str = "ok", name: str = "bash") -> ToolResultMessage:
    return ToolResultMessage(toolCallId=call_id, toolName=name, content=[TextBlock(text=out)])


def synthetic(call_id: str, name: str = "bash") -> ToolResultMessage:
    return ToolResultMessage(
        toolCallId=call_id, toolName=name, content=[TextBlock(text=MISSING_TOOL_RESULT_TEXT)], isError=True
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
