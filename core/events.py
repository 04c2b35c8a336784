"""What crosses Redis, as versioned msgspec structs (JSON on the wire).

The TypeScript plugin writes TurnEvent as JSON with the same field names, in
the stream entry field ``e``. ``decode_*`` raises ``EventDecodeError`` for
anything that is not a valid event of a known version.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from core.ov.messages import OVMessage
from core.session import SessionAddress

EVENT_VERSION = 1
"""The one version this code writes and reads."""

STREAM_FIELD = "e"
"""The stream entry field holding the encoded event."""


class EventDecodeError(ValueError):
    """Bytes that are not a valid event: garbage, wrong version, missing fields,
    nesting too deep to decode."""


CommitReason = Literal["threshold", "compact", "memory_store", "manual", "session_end"]
"""Why a commit was asked for; a request naming any other is refused where it is made."""


class TurnEvent(msgspec.Struct, kw_only=True):
    """One afterTurn (or commitTurn) call of OpenClaw."""

    v: int = EVENT_VERSION
    event_id: str
    session_id: str
    """OpenClaw's sessionId, raw; the worker maps it to the OV id (core.ids)."""
    session_key: str | None = None
    agent_id: str | None = None
    """runtimeContext.agentId as OpenClaw gave it, raw; resolution is core.ids'."""
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """The whole transcript as OpenClaw holds it (AgentMessage JSON). Kept as JSON objects,
    not structs: a host's transcript carries provider aliases, custom roles and half-written
    blocks that capture must read leniently (``core.messages.canonical``), never reject."""
    pre_prompt_message_count: int = 0
    is_heartbeat: bool = False
    token_budget: int | None = None
    published_at: float
    """Unix seconds when the publisher wrote it."""
    advancement_key: str | None = None
    """commitTurn's key (OpenClaw >= 2026.8.1); capture dedupes on it."""
    user: str | None = None
    """Tenant label selecting the OV user key (Settings.user_api_keys); None: the default."""
    commit: CommitReason | None = None
    """A commit marker (no messages): once every earlier entry of the session is
    in OV, capture asks for a commit with this reason (``session_end``: the
    conversation was reset, replaced or ended)."""
    import_transcript: bool = False
    """The plugin's bootstrap import of a transcript older than ovstream: written
    only into a session capture has never applied an entry to (core.turns)."""
    import_run: str | None = None
    """The run of ``openclaw ovstream import`` that sent this import: capture records what it
    did with it under the run (``Keys.session(...).imports``), which that run then asks for."""
    release: bool = False
    """A release marker (no messages; only ``ovstream dlq replay`` sends one): the session,
    parked behind a dead-lettered entry, applies its dead letters here in their order, then
    goes on (workers.capture.parking)."""


class CommitRequest(msgspec.Struct, kw_only=True):
    """A commit asked for by capture (threshold), compact or memory_store."""

    v: int = EVENT_VERSION
    commit_id: str
    """RQ job id too: only [A-Za-z0-9_-]."""
    ov_session_id: str
    agent_id: str
    user: str | None = None
    reason: CommitReason = "threshold"
    keep_recent_count: int
    generation: int
    requested_at: float

    @property
    def address(self) -> SessionAddress:
        return SessionAddress(self.ov_session_id, self.agent_id, self.user)


CommitStatus = Literal["pending", "running", "completed", "failed", "timeout", "skipped"]


class CommitOutcome(msgspec.Struct, kw_only=True):
    """What became of one commit; kept in Redis as the record of truth."""

    v: int = EVENT_VERSION
    commit_id: str
    ov_session_id: str
    agent_id: str
    user: str | None = None
    reason: str = "threshold"
    status: CommitStatus
    task_id: str | None = None
    archive_uri: str | None = None
    archived: bool = False
    memories_extracted: int | None = None
    error: str | None = None
    requested_at: float = 0.0
    finished_at: float | None = None
    ov_commits_before: int | None = None
    """OV's commit count of the session just before this commit was sent to OV: a job run
    again after a crash tells from it whether OV took the commit (never commits twice)."""
    phase1_sent_at: float | None = None
    """When this commit was last sent to OV with no answer recorded since (None once an answer,
    an error answer included, says the send is over): a job run again while OV's count has not
    moved waits until that send's deadline before sending again, for it may still land (its
    worker taken for dead while alive and waiting on OV, say)."""


class ContextSnapshot(msgspec.Struct, kw_only=True):
    """The session's OV /context, cached in Redis for assemble."""

    v: int = EVENT_VERSION
    ov_session_id: str
    agent_id: str
    user: str | None = None
    latest_archive_overview: str = ""
    pre_archive_abstracts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    messages: list[OVMessage] = msgspec.field(default_factory=list)
    """OV's message records, as ``/context`` answered them (or as capture wrote them since)."""
    estimated_tokens: int = 0
    total_archives: int = 0
    failed_archives: int = 0
    applied_stream_id: str = "0-0"
    """Last stream entry reflected in this snapshot."""
    captured_through: int = 0
    """len(messages) of the last applied TurnEvent: OpenClaw messages [0, n) are in OV."""
    event_ids: list[str] = msgspec.field(default_factory=list)
    """Recent event ids applied up to ``applied_stream_id``: the turns this snapshot
    reflects, so assemble's overlay adds each other turn exactly once."""
    advancements: list[str] = msgspec.field(default_factory=list)
    """Recent commitTurn advancement keys applied up to ``applied_stream_id``."""
    refreshed_at: float = 0.0


_T = TypeVar("_T")
_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def encode(obj: msgspec.Struct) -> bytes:
    return _encoder.encode(obj)


def decode(data: bytes | str, kind: type[_T]) -> _T:
    """Decode one event of ``kind``; any failure is an EventDecodeError."""
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        obj: _T = dec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise EventDecodeError(f"invalid {kind.__name__}: {exc}") from exc
    except RecursionError:  # absurdly nested JSON: msgspec gives up at Python's recursion limit
        raise EventDecodeError(f"invalid {kind.__name__}: nested too deeply") from None
    version = getattr(obj, "v", None)
    if version != EVENT_VERSION:
        raise EventDecodeError(f"invalid {kind.__name__}: unknown version {version!r}")
    return obj
