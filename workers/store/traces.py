"""What assemble last answered for a session, and what its last recall found: kept for the
console's session inspector (workers.rpc.console), so an agent builder can see what the model
got and why. Each is one small string per session with a lifetime (``consoleTraceTtlS``;
0 keeps none): message previews, not the messages, so a fleet's sessions cost kilobytes each.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
import redis.asyncio as aioredis

_T = TypeVar("_T")

_encoder = msgspec.json.Encoder()


class RecalledMemory(msgspec.Struct, kw_only=True, frozen=True):
    uri: str
    score: float
    category: str = ""


class RecallTrace(msgspec.Struct, kw_only=True, frozen=True):
    """One recall search of the session: its query and the memories the block carried."""

    at: float
    query: str
    memories: list[RecalledMemory] = msgspec.field(default_factory=list)


class MessageLine(msgspec.Struct, kw_only=True, frozen=True):
    """One message of an answer: its role, its estimated tokens and the start of its text."""

    role: str
    tokens: int
    preview: str


class AssembleTrace(msgspec.Struct, kw_only=True, frozen=True):
    """One assemble answer, as the inspector shows it."""

    at: float
    ov_session_id: str
    session_key: str | None = None
    """The host's key of the session: the trace is kept under the address the key alone
    names too, so the inspector finds a session by its key (a new id per /new)."""
    path: str
    """full (the main call), recall (transform-context) or bypass."""
    reason: str
    """assembled, lag_overlay, recalled, or the passthrough's reason."""
    budget: int
    estimated_tokens: int
    messages: list[MessageLine] = msgspec.field(default_factory=list)
    """The first and the last of the answer's messages (workers.rpc.traces.TRACE_HEAD and
    TRACE_TAIL): a trace stays a few KB however long the session."""
    message_count: int = 0
    """How many messages the answer had (0: a trace of an older shape, all of them kept)."""
    left_out: int = 0
    """Messages between the first and the last ones kept, not kept."""
    session_kept: int = 0
    """OV session messages the budget kept."""
    overlay_messages: int = 0
    """Messages the overlay appended to the snapshot (turns capture had not applied yet)."""
    overlay_turns: list[str] = msgspec.field(default_factory=list)
    """Event ids of the turns the overlay appended (published after the snapshot's entry)."""
    snapshot_id: str | None = None
    """The stream entry the snapshot answered from reflected (None: no snapshot)."""
    system_prompt_addition: str | None = None
    injected: str | None = None
    """What a recall call put before the user's latest message: its recall block (the start of
    it, ``workers.rpc.traces.INJECTED_CHARS``)."""
    masked: dict[str, int] = msgspec.field(default_factory=dict)
    """Values masked (core.redaction) in the answer's newest turn, by kind: the host's transcript
    holds them as typed; the trace, like OV, holds placeholders."""


async def write_trace(redis: aioredis.Redis, key: str, trace: AssembleTrace | RecallTrace, ttl_s: int) -> None:
    await redis.set(key, _encoder.encode(trace), ex=ttl_s)


async def read_assemble_trace(redis: aioredis.Redis, key: str) -> AssembleTrace | None:
    return _read(await redis.get(key), _assemble_decoder)


async def read_recall_trace(redis: aioredis.Redis, key: str) -> RecallTrace | None:
    return _read(await redis.get(key), _recall_decoder)


def _read(raw: bytes | str | None, decoder: msgspec.json.Decoder[_T]) -> _T | None:
    """The stored trace; None when there is none, or it is of an older shape (it is only a view)."""
    if raw is None:
        return None
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:
        return None


_assemble_decoder = msgspec.json.Decoder(AssembleTrace)
_recall_decoder = msgspec.json.Decoder(RecallTrace)
