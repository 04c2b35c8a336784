"""The seed's five message post-processing steps, as pure functions.

Assemble runs them over every context it returns, in this order:

1. ``normalize_assistant_content`` and 2. ``canonicalize_agent_messages`` (in
   ``core.messages.canonical``) work on raw OpenClaw JSON dicts, so provider
   aliases decode into our structs; ``parse_messages`` runs them.
3. ``sanitize_tool_use_result_pairing``, 4. ``merge_consecutive_users`` and
   5. ``ensure_alternation`` work on typed messages and repair what strict
   providers (Anthropic, Bedrock, Gemini) reject.

Behaviour follows the reference plugin (session-transcript-repair.ts and
context-message-adapter.ts); where we go further it says so below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    parse_messages,
)

MISSING_TOOL_RESULT_TEXT = (
    "[openclaw] missing tool result in session history; inserted synthetic error result for transcript repair."
)
"""Text of the synthetic error result given to a call that has none (OpenClaw's wording)."""

NO_CONTENT_TEXT = "(no content)"
"""Placeholder user text inserted between two adjacent assistant messages."""

UNKNOWN_TOOL_NAME = "unknown"

_ERRORED_STOP_REASONS = frozenset({"error", "aborted"})


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
            out[-1] = msgspec.structs.replace(prev, content=_user_blocks(prev) + _user_blocks(msg))
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
