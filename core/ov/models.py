"""Typed results of the OV client (OpenViking 0.5.2), as msgspec structs.

Every struct ignores fields it does not know (the server adds fields between
releases) and has a default for each field the server may leave out, so a
decode fails only when a field has the wrong type. Names follow the server's
JSON keys; the two camelCase keys of ``/context`` are renamed to snake_case.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from core.ov.messages import OVMessage


class _Result(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Base: tolerant of extra fields."""


class SessionState(_Result):
    """``GET /api/v1/sessions/{id}``."""

    session_id: str = ""
    uri: str = ""
    message_count: int = 0
    commit_count: int = 0
    pending_tokens: int = 0
    """Estimated tokens of the messages outside the keep window (what the next commit archives)."""
    keep_recent_count: int = 0
    """The keep_recent_count of the last commit; the server remembers it."""
    total_message_count: int | None = None
    created_at: str = ""
    updated_at: str = ""
    last_commit_at: str = ""
    memories_extracted: dict[str, int] = msgspec.field(default_factory=dict)


class AddMessagesResult(_Result):
    """``POST .../messages`` and ``.../messages/batch``; ``added`` is 1 for a single add."""

    session_id: str = ""
    message_count: int = 0
    pending_tokens: int = 0
    added: int = 0


class CommitAccepted(_Result):
    """``POST .../commit``: phase 1 (archive) is done; phase 2 runs as ``task_id``.

    ``status`` is ``"accepted"`` or ``"skipped"`` (then ``task_id`` and
    ``archive_uri`` are None, ``archived`` is False and ``reason`` says why:
    ``no_messages`` or ``all_within_keep_window``).
    """

    status: str = "accepted"
    task_id: str | None = None
    archive_uri: str | None = None
    archived: bool = False
    reason: str | None = None
    session_id: str = ""
    trace_id: str | None = None


TASK_TERMINAL = frozenset({"completed", "failed", "cancelled"})


class TaskState(_Result):
    """``GET /api/v1/tasks/{id}``: pending|running|cancelling|completed|failed|cancelled."""

    task_id: str = ""
    status: str = "pending"
    task_type: str = ""
    resource_id: str | None = None
    result: dict[str, Any] | None = None
    error: Any = None
    """A string in 0.5.2 (None unless failed)."""
    stage: str | None = None
    created_at: float | None = None
    updated_at: float | None = None

    @property
    def done(self) -> bool:
        return self.status in TASK_TERMINAL


class ContextStats(_Result):
    """``stats`` of ``/context``; camelCase on the wire.

    In 0.5.2 ``failedArchives`` is 0 or 1: whether the newest finished archive failed.
    """

    total_archives: int = msgspec.field(default=0, name="totalArchives")
    included_archives: int = msgspec.field(default=0, name="includedArchives")
    dropped_archives: int = msgspec.field(default=0, name="droppedArchives")
    failed_archives: int = msgspec.field(default=0, name="failedArchives")
    active_tokens: int = msgspec.field(default=0, name="activeTokens")
    archive_tokens: int = msgspec.field(default=0, name="archiveTokens")


class SessionContext(_Result):
    """``GET .../context?token_budget=N``.

    ``messages``: the raw messages of archives whose phase 2 is still running, then
    the active ones. ``pre_archive_abstracts`` is always
    empty in 0.5.2.
    """

    latest_archive_overview: str = ""
    pre_archive_abstracts: list[Any] = msgspec.field(default_factory=list)
    messages: list[OVMessage] = msgspec.field(default_factory=list)
    estimated_tokens: int = msgspec.field(default=0, name="estimatedTokens")
    stats: ContextStats = msgspec.field(default_factory=ContextStats)


class Archive(_Result):
    """``GET .../archives/{archive_id}`` (completed archives only)."""

    archive_id: str = ""
    abstract: str = ""
    overview: str = ""
    messages: list[OVMessage] = msgspec.field(default_factory=list)


class Hit(_Result):
    """One ``find`` match. Level 2 is a leaf (a memory file); 0 and 1 are directory abstracts."""

    uri: str = ""
    context_type: str = ""
    level: int = 2
    score: float = 0.0
    abstract: str = ""
    tags: list[str] = msgspec.field(default_factory=list)


class FindResult(_Result):
    """``POST /api/v1/search/find``."""

    memories: list[Hit] = msgspec.field(default_factory=list)
    resources: list[Hit] = msgspec.field(default_factory=list)
    skills: list[Hit] = msgspec.field(default_factory=list)
    total: int = 0

    def all_hits(self) -> list[Hit]:
        return [*self.memories, *self.resources, *self.skills]


class GrepMatch(_Result):
    """One ``grep`` line."""

    uri: str = ""
    line: int = 0
    content: str = ""


class GrepResult(_Result):
    """``POST /api/v1/search/grep``."""

    matches: list[GrepMatch] = msgspec.field(default_factory=list)
    count: int = 0


StructT = TypeVar("StructT", bound=msgspec.Struct)


def to_struct(value: Any, type_: type[StructT]) -> StructT:
    """Build a result struct from decoded JSON; ``msgspec.ValidationError`` on a bad shape."""
    return msgspec.convert(value if value is not None else {}, type_, strict=False)
