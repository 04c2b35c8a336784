"""What one call of the OV 0.5.2 HTTP API is (``Call``), and the session calls both OV
clients make: the async one (core.ov.client: capture, the RPC, repairs) and the sync one
(core.ov.sync_client: the commit jobs and the poller's reads, each on its own thread).

Pure: a call is its method, path, request options and how its result is decoded; a client
sends it (``send``) through its one transport, tries it again when it may, and decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from core.ov.envelope import decode_result
from core.ov.messages import known_parts
from core.ov.models import CommitAccepted, SessionContext, SessionState, TaskState, to_struct

T = TypeVar("T")


def as_is(result: Any) -> Any:
    """The result as OV answered it (the envelope already unwrapped)."""
    return result


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request to OV and how its answer is read.

    Only an ``idempotent`` call is tried again (GETs, DELETEs, the read-only POST searches):
    a retried add or commit could apply twice. ``raw``: the answer is not enveloped
    (``/health``). ``options``: httpx.Request's (``params``, ``json``, ``files``), and
    ``timeout`` (an ``httpx.Timeout``) in place of the client's for this call (a batch of
    messages waits ``write_timeout``).
    """

    method: str
    path: str
    decode: Callable[[Any], T] = as_is
    idempotent: bool = False
    raw: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def segment(value: str) -> str:
    """One URL path segment, fully percent-encoded (``/`` included)."""
    return quote(str(value), safe="")


def _session(session_id: str) -> str:
    return f"/api/v1/sessions/{segment(session_id)}"


def get_session(session_id: str, *, auto_create: bool = False) -> Call[SessionState]:
    params = {"auto_create": "true"} if auto_create else None
    return Call("GET", _session(session_id), _decoder(SessionState), idempotent=True, options={"params": params})


def commit(
    session_id: str, *, keep_recent_count: int | None = None, enable_working_memory: bool | None = None
) -> Call[CommitAccepted]:
    body: dict[str, Any] = {}
    if keep_recent_count is not None:
        body["keep_recent_count"] = keep_recent_count
    if enable_working_memory is not None:
        body["enable_working_memory"] = enable_working_memory
    return Call("POST", f"{_session(session_id)}/commit", _decoder(CommitAccepted), options={"json": body})


def get_task(task_id: str) -> Call[TaskState]:
    return Call("GET", f"/api/v1/tasks/{segment(task_id)}", _decoder(TaskState), idempotent=True)


def session_commit_tasks(session_id: str, *, limit: int = 20) -> Call[list[TaskState]]:
    """The session's commit tasks OV still knows (``GET /api/v1/tasks``), newest first."""
    params = {"task_type": "session_commit", "resource_id": session_id, "limit": str(limit)}
    return Call("GET", "/api/v1/tasks", _newest_first, idempotent=True, options={"params": params})


def get_context(session_id: str, *, token_budget: int) -> Call[SessionContext]:
    params = {"token_budget": str(token_budget)}
    decode = _decoder(SessionContext)
    path = f"{_session(session_id)}/context"
    return Call("GET", path, lambda r: decode(with_known_parts(r)), idempotent=True, options={"params": params})


def _decoder(type_: type[T]) -> Callable[[Any], T]:
    return lambda result: decode_result(result, type_)  # type: ignore[type-var]


def _newest_first(result: Any) -> list[TaskState]:
    tasks = [to_struct(item, TaskState) for item in result or [] if isinstance(item, dict)]
    return sorted(tasks, key=lambda t: t.created_at or 0.0, reverse=True)


def with_known_parts(result: Any) -> Any:
    """An answer holding ``messages`` with each part of a kind ovstream does not know kept
    as an ``OtherPart`` (core.ov.messages.known_parts), not failing the whole answer."""
    if isinstance(result, dict) and "messages" in result:
        return {**result, "messages": known_parts(result["messages"])}
    return result
