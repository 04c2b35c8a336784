"""Text around auto-recall: the injected block's marker, removing injected
blocks and host metadata from text before it is searched or captured.

Pure. Behaviour follows the reference plugin's text-utils.ts (its
sanitizeUserTextForCapture and prepareRecallQuery); the patterns are ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from core.defaults import RECALL_QUERY_MAX_CHARS

AUTO_RECALL_SOURCE_MARKER = "Source: openviking-auto-recall"
"""Line inside every block auto-recall injects; its presence means "already injected"."""

RELEVANT_MEMORIES_OPEN = "<relevant-memories>"
RELEVANT_MEMORIES_CLOSE = "</relevant-memories>"

_I_S = re.IGNORECASE | re.DOTALL

_RELEVANT_MEMORIES_BLOCK = re.compile(r"<relevant-memories>.*?</relevant-memories>", _I_S)
# An opening tag whose block was cut off (e.g. a truncated transcript): the
# rest of the text is injected memory, not user input.
_RELEVANT_MEMORIES_UNTERMINATED = re.compile(r"<relevant-memories>.*\Z", _I_S)
_OPENVIKING_CONTEXT_BLOCK = re.compile(r"<openviking-context\b[^>]*>.*?</openviking-context>", _I_S)

# Hosts prepend untrusted metadata as a labelled fenced block, e.g.
# 'Conversation info (untrusted metadata): ```json {...} ```'.
_CONVERSATION_METADATA = re.compile(
    r"(?:^|\n)\s*(?:Conversation info|Conversation metadata|会话信息|对话信息)"
    r"\s*(?:\([^)]+\))?\s*:\s*```.*?```",
    _I_S,
)
_SENDER_METADATA = re.compile(r"Sender\s*\([^)]*\)\s*:\s*```.*?```", _I_S)
_JSON_FENCE = re.compile(r"```json\s*(.*?)```", _I_S)
_METADATA_JSON_KEY = re.compile(
    r'"(session|sessionid|sessionkey|conversationid|channel|sender|userid|agentid|timestamp|timezone)"\s*:',
    re.IGNORECASE,
)
_METADATA_KEYS_TO_DROP_FENCE = 3

# A leading "[Fri 2026-04-10 17:20 GMT+8]" / "[2026-03-29T10:00:00Z]" stamp.
# "[[" is left alone: that opens a wiki link, not a stamp.
_LEADING_TIMESTAMP = re.compile(
    r"""^\s*(?!\[\[)\[
        (?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*\s+)?
        (?:\d{4}[-/]\d{2}[-/]\d{2}|\d{2}[-/]\d{2}[-/]\d{2,4})
        (?:[T\s]\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?
           (?:Z|[+-]\d{1,2}(?::\d{2})?)?
           (?:\s*[A-Z]{1,5}(?:[+-]\d{1,2})?)?
        )?
        \s*\]\s*""",
    re.IGNORECASE | re.VERBOSE,
)
_SUBAGENT_PREFIX = re.compile(r"^\s*\[Subagent Context\]", re.IGNORECASE)
# Old hosts stood a "[tool: name]" / "[toolUse: name]" line in for a tool call.
_TOOL_PLACEHOLDER = re.compile(r"\s*\[tool(?::\s*|Use:\s*)[^\]]+\]\s*", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


def strip_recall_blocks(text: str) -> str:
    """``text`` without injected ``<relevant-memories>`` / ``<openviking-context>``
    blocks (any case), including an unterminated ``<relevant-memories>`` block,
    which runs to the end. Whitespace inside the kept text is left alone; when
    something was removed the result is trimmed."""
    if not text or "<" not in text:
        return text
    stripped = _OPENVIKING_CONTEXT_BLOCK.sub("", text)
    stripped = _RELEVANT_MEMORIES_BLOCK.sub("", stripped)
    stripped = _RELEVANT_MEMORIES_UNTERMINATED.sub("", stripped)
    return stripped.strip() if stripped != text else text


def _drop_metadata_fence(match: re.Match[str]) -> str:
    keys = {k.lower() for k in _METADATA_JSON_KEY.findall(match.group(1))}
    return " " if len(keys) >= _METADATA_KEYS_TO_DROP_FENCE else match.group(0)


def sanitize_capture_text(text: str) -> str:
    """User or assistant text as it should reach OV: without injected blocks,
    host metadata, leading timestamp, ``[Subagent Context]`` prefix and NULs,
    whitespace collapsed to single spaces. A bare tool placeholder gives ``""``."""
    if not text or _TOOL_PLACEHOLDER.fullmatch(text):
        return ""
    # Blocks become a space, not nothing, so the words around them stay apart.
    cleaned = _OPENVIKING_CONTEXT_BLOCK.sub(" ", text)
    cleaned = _RELEVANT_MEMORIES_BLOCK.sub(" ", cleaned)
    cleaned = _RELEVANT_MEMORIES_UNTERMINATED.sub(" ", cleaned)
    cleaned = _CONVERSATION_METADATA.sub(" ", cleaned)
    cleaned = _SENDER_METADATA.sub(" ", cleaned)
    cleaned = _JSON_FENCE.sub(_drop_metadata_fence, cleaned)
    cleaned = _LEADING_TIMESTAMP.sub("", cleaned, count=1)
    cleaned = _SUBAGENT_PREFIX.sub("", cleaned, count=1)
    cleaned = cleaned.replace("\x00", "")
    return _WHITESPACE.sub(" ", cleaned).strip()


def prepare_recall_query(text: str, max_chars: int = RECALL_QUERY_MAX_CHARS) -> str:
    """The search query for a user message: sanitised as for capture, then cut
    to ``max_chars`` characters (and trimmed again, so no trailing space)."""
    query = sanitize_capture_text(text)
    if len(query) > max_chars:
        query = query[:max_chars].rstrip()
    return query


def message_text(message: Any) -> str:
    """The text blocks of one message (string content, or ``type: text``
    blocks joined by newlines); ``""`` for anything else."""
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
        )
    return ""


def latest_user_index(messages: Iterable[Any]) -> int | None:
    """Index of the last message with role ``user``, or None."""
    found = None
    for index, message in enumerate(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            found = index
    return found


def has_recall_marker(messages_or_text: Any) -> bool:
    """Whether auto-recall already injected into this.

    A string is searched directly; a message (dict) in its text blocks; a list
    of messages in its latest user message only, since that is where the
    block goes (an older message's block does not stop a new injection).
    """
    if isinstance(messages_or_text, str):
        return AUTO_RECALL_SOURCE_MARKER in messages_or_text
    if isinstance(messages_or_text, Mapping):
        return AUTO_RECALL_SOURCE_MARKER in message_text(messages_or_text)
    if isinstance(messages_or_text, list | tuple):
        index = latest_user_index(messages_or_text)
        return index is not None and AUTO_RECALL_SOURCE_MARKER in message_text(messages_or_text[index])
    return False
