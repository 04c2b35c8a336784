"""State and pure helpers of the in-memory OpenViking 0.5.2 fake (workers.dev.fake_ov.app).

Shapes follow what 0.5.2 returns: sessions live at
``viking://user/<uid>/sessions/<sid>``, archives at ``<session>/history/archive_NNN``
(three digits, from 001), messages are ``{id, role, parts, created_at, peer_id?, turn_id?}``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from core.messages.tokens import estimate_tokens
from workers.dev.fake_ov.uris import RESERVED_USER_SEGMENTS, SCOPES, context_type_of, uri_parts

_ID_RE = re.compile(r"^[a-zA-Z0-9_.@-]+$")
MEMORY_TRIGGERS = ("i prefer", "remember")


class FakeError(Exception):
    """An OV error answer: becomes ``{"status":"error","error":{code,message,details}}``."""

    STATUS = {
        "INVALID_ARGUMENT": 400,
        "INVALID_URI": 400,
        "UNAUTHENTICATED": 401,
        "PERMISSION_DENIED": 403,
        "NOT_FOUND": 404,
        "ALREADY_EXISTS": 409,
        "CONFLICT": 409,
        "FAILED_PRECONDITION": 412,
        "RESOURCE_EXHAUSTED": 429,
        "INTERNAL": 500,
        "UNAVAILABLE": 503,
        "DEADLINE_EXCEEDED": 504,
    }

    def __init__(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        status: int | None = None,
        *,
        short: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.status = status or self.STATUS.get(code, 500)
        self.short = short
        """0.5.2's short envelope: no ``result`` key (validation errors, some 404s)."""

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.short:
            return {"status": "error", "error": error | ({"details": self.details} if self.details else {})}
        return {"status": "error", "result": None, "error": error | {"details": self.details}}


def invalid(message: str, field: str | None = None) -> FakeError:
    """A request-validation 400 as 0.5.2 sends it (short envelope, ``validation_errors``)."""
    loc = ["body", field] if field else ["body"]
    return FakeError(
        "INVALID_ARGUMENT",
        message,
        {"validation_errors": [{"loc": loc, "message": message, "type": "value_error"}]},
        short=True,
    )


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex


def valid_identifier(value: str) -> bool:
    return bool(_ID_RE.match(value)) and value not in {".", ".."}


# --- messages ------------------------------------------------------------------------


def normalize_part(raw: Any) -> dict[str, Any]:
    """A request part as 0.5.2 stores it (unknown types become text, like the server)."""
    if not isinstance(raw, dict):
        return {"type": "text", "text": str(raw)}
    kind = raw.get("type", "text")
    if kind == "text":
        return {"type": "text", "text": str(raw.get("text", "") or "")}
    if kind == "context":
        ctype = raw.get("context_type", "memory")
        if ctype not in {"memory", "resource", "skill"}:
            raise FakeError("INVALID_ARGUMENT", f"invalid context_type: {ctype!r}")
        return {
            "type": "context",
            "uri": raw.get("uri", ""),
            "context_type": ctype,
            "abstract": raw.get("abstract", ""),
        }
    if kind == "tool":
        part = {
            "type": "tool",
            "tool_id": raw.get("tool_id", ""),
            "tool_name": raw.get("tool_name", ""),
            "tool_uri": raw.get("tool_uri", ""),
            "skill_uri": raw.get("skill_uri", ""),
            "tool_status": raw.get("tool_status", "pending"),
        }
        if raw.get("tool_input") is not None:
            if not isinstance(raw["tool_input"], dict):
                raise FakeError("INVALID_ARGUMENT", "tool_input must be an object")
            part["tool_input"] = raw["tool_input"]
        if raw.get("tool_output"):
            part["tool_output"] = str(raw["tool_output"])
        return part
    if kind == "image_url":
        url = raw.get("image_url")
        url = url.get("url", "") if isinstance(url, dict) else (url or "")
        if not str(url).strip():
            raise FakeError("INVALID_ARGUMENT", "image_url part requires a non-empty URL")
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": str(raw.get("text", raw))}


def message_text(message: dict[str, Any]) -> str:
    """The text the server counts for a message's tokens (and that the fake searches)."""
    chunks: list[str] = []
    for p in message.get("parts", []):
        kind = p.get("type")
        if kind == "text":
            chunks.append(p.get("text", ""))
        elif kind == "context":
            chunks.append(p.get("abstract", ""))
        elif kind == "tool":
            chunks += [p.get("tool_id", ""), p.get("tool_name", "")]
            if p.get("tool_input"):
                chunks.append(json.dumps(p["tool_input"], ensure_ascii=False))
            chunks.append(p.get("tool_output", ""))
    return "".join(chunks)


def message_tokens(message: dict[str, Any]) -> int:
    return estimate_tokens(message_text(message))


def build_messages(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """One request message -> stored messages (a user message of only tool parts splits, as in 0.5.2)."""
    if not isinstance(spec, dict):
        raise invalid("a message must be an object")
    role = spec.get("role")
    if not isinstance(role, str):
        raise invalid("Field required: role", "role")
    if spec.get("parts") is None and spec.get("content") is None:
        raise invalid("Value error, Either 'content' or 'parts' must be provided")
    if spec.get("parts") is not None:
        if not isinstance(spec["parts"], list):
            raise invalid("parts must be a list", "parts")
        parts = [normalize_part(p) for p in spec["parts"]]
    else:
        parts = [{"type": "text", "text": str(spec["content"])}]
    peer = spec.get("peer_id")
    if peer is not None:
        if not isinstance(peer, str) or (peer.strip() and not valid_identifier(peer.strip())):
            raise invalid(f"Value error, Invalid peer_id: {peer!r}", "peer_id")
        peer = peer.strip() or None
    base: dict[str, Any] = {"role": role, "created_at": spec.get("created_at") or now_iso()}
    if peer is not None:
        base["peer_id"] = peer
    if spec.get("turn_id") is not None:
        base["turn_id"] = spec["turn_id"]
    groups = (
        [[p] for p in parts]
        if (role == "user" and len(parts) > 1 and all(p["type"] == "tool" for p in parts))
        else [parts]
    )
    return [{"id": new_id("msg_"), **base, "parts": g} for g in groups]


# --- sessions ------------------------------------------------------------------------


@dataclass
class FakeArchive:
    index: int
    uri: str
    messages: list[dict[str, Any]]
    enable_working_memory: bool
    task_id: str
    state: str = "pending"
    """pending (phase 2 running) | completed | failed."""
    overview: str = ""
    abstract: str = ""

    @property
    def archive_id(self) -> str:
        return f"archive_{self.index:03d}"


@dataclass
class FakeSession:
    session_id: str
    uri: str
    account: str
    user: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    archives: list[FakeArchive] = field(default_factory=list)
    keep_recent_count: int = 0
    commit_count: int = 0
    total_message_count: int = 0
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    last_commit_at: str = ""
    memories_extracted: dict[str, int] = field(default_factory=lambda: {"total": 0})

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def pending_tokens(self) -> int:
        """Tokens of the messages outside the remembered keep window (0.5.2 semantics)."""
        keep = self.keep_recent_count
        outside = self.messages if keep <= 0 else self.messages[: max(0, len(self.messages) - keep)]
        return sum(message_tokens(m) for m in outside)

    def state(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "uri": self.uri,
            "user": {"account_id": self.account, "user_id": self.user},
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "message_count": self.message_count,
            "commit_count": self.commit_count,
            "pending_tokens": self.pending_tokens,
            "keep_recent_count": self.keep_recent_count,
            "total_message_count": self.total_message_count,
            "last_commit_at": self.last_commit_at,
            "memories_extracted": dict(self.memories_extracted),
        }


@dataclass
class FakeTask:
    task_id: str
    account: str
    user: str
    session_id: str
    archive: FakeArchive
    mode: str
    """complete | fail | hang, fixed when the commit is made."""
    reads_left: int
    status: str = "pending"
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_type": "session_commit",
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "resource_id": self.session_id,
            "meta": {},
            "stage": None,
            "result": self.result,
            "error": self.error,
        }


# --- stored content (memories, resources, skills) ------------------------------------


@dataclass
class Entry:
    uri: str
    content: str
    abstract: str = ""
    overview: str = ""
    created_at: str = field(default_factory=now_iso)

    @property
    def context_type(self) -> str:
        return context_type_of(self.uri)


def canonical_uri(uri: Any, user: str, *, field_name: str = "uri") -> str:
    """Validate a request URI and expand ``viking://~`` / ``viking://session`` as 0.5.2 does."""
    if not isinstance(uri, str) or not uri.strip():
        raise FakeError("INVALID_URI", f"{field_name} must not be empty", {"uri": uri})
    raw = uri.strip()
    if not raw.startswith("viking://"):
        raise FakeError("INVALID_URI", "URI must start with 'viking://'", {"uri": raw})
    parts = uri_parts(raw)
    if parts and parts[0] not in SCOPES:
        raise FakeError("INVALID_URI", f"Invalid scope '{parts[0]}'", {"uri": raw})
    if not parts:
        return "viking://"
    if parts[0] == "~":
        parts = ["user", user, *parts[1:]]
    elif parts[0] == "session":
        parts = ["user", user, "sessions", *parts[1:]]
    elif parts[0] == "user" and len(parts) >= 2 and parts[1] != user and parts[1] in RESERVED_USER_SEGMENTS:
        rest = "/".join(parts[1:])
        raise FakeError(
            "INVALID_URI",
            f"'viking://user/{rest}' no longer expands to the current "
            f"user's space: use 'viking://~/{rest}' or 'viking://user/{{user_id}}/{rest}'",
            {"uri": raw},
        )
    return "viking://" + "/".join(parts)


def summarize(messages: list[dict[str, Any]]) -> str:
    """Deterministic working-memory overview of archived messages."""
    lines = [f"# Session summary ({len(messages)} messages)"]
    for m in messages:
        text = " ".join(message_text(m).split())
        lines.append(f"- {m.get('role')}: {text[:200]}")
    return "\n".join(lines)


def memory_worthy(message: dict[str, Any]) -> str | None:
    """The text of a message phase 2 turns into a memory, else None."""
    text = " ".join(p.get("text", "") for p in message.get("parts", []) if p.get("type") == "text").strip()
    lowered = text.lower()
    return text if text and any(t in lowered for t in MEMORY_TRIGGERS) else None


# --- request plumbing ------------------------------------------------------------------


@dataclass
class Ctx:
    account: str
    user: str
    role: str  # "user" | "admin" | "root"
    peer: str | None = None


@dataclass
class Tenant:
    account: str
    user: str
    sessions: dict[str, FakeSession] = field(default_factory=dict)
    tasks: dict[str, FakeTask] = field(default_factory=dict)


@dataclass
class Req:
    request: httpx.Request
    params: dict[str, str]
    ctx: Ctx

    @property
    def query(self) -> httpx.QueryParams:
        return self.request.url.params

    def body(self, *, optional: bool = False) -> dict[str, Any]:
        raw = self.request.content
        if not raw:
            if optional:
                return {}
            raise invalid("Field required")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise invalid(f"JSON decode error: {exc}") from exc
        if not isinstance(data, dict):
            raise invalid("Input should be a valid dictionary")
        return data
