"""How every ovstream process logs: text lines by default, JSON lines on request
(``logFormat = "json"``), with the fields an operator filters on.

Each record carries the process (``capture``, ``worker``, ``rpc``, ...) and, where the code
runs for one, the shard, session and commit: ``SHARD``, ``SESSION`` and ``COMMIT_ID`` are
context variables set at the top of a shard consumer, a session's round and a commit job,
so every line logged below them says which one, without each call passing it. A call may
add ``extra={"outcome": ...}`` (and any of the fields) itself.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import msgspec

SHARD: ContextVar[int | str | None] = ContextVar("ovstream_shard", default=None)
"""A shard's number (generation 0) or ``g<generation>.<number>`` (core.shard_map.StreamShard)."""
SESSION: ContextVar[str | None] = ContextVar("ovstream_session", default=None)
COMMIT_ID: ContextVar[str | None] = ContextVar("ovstream_commit_id", default=None)

FIELDS = ("shard", "session", "commit_id", "outcome")
"""Fields a JSON line carries when they are known."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_NAME = "ovstream"

_encoder = msgspec.json.Encoder()


class ContextFields(logging.Filter):
    """Puts the process name and the context variables on every record."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def filter(self, record: logging.LogRecord) -> bool:
        record.ovstream_process = self.process
        for name, var in (("shard", SHARD), ("session", SESSION), ("commit_id", COMMIT_ID)):
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


_SECRET_PARAM = re.compile(
    r"(?i)(?<![\w-])((?:access_?|auth_?|id_?|refresh_?)?token|api[_-]?key|apikey|key|password|passwd|secret|auth"
    r"|authorization|credential)=([^&\s\"']+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with credential-looking values left out: a query string's (or form's)
    ``token=``, ``key=``, ``password=``... values and ``Bearer``/``Basic`` credentials."""
    if "=" not in text and " " not in text:
        return text
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", _SECRET_PARAM.sub(rf"\1={REDACTED}", text))


class NoCredentials(logging.Filter):
    """No credential in any line, wherever a client put it: uvicorn's access log writes the
    request's path with its query string, so a token sent as ``?token=`` (refused, but a
    valid one all the same) would land in the log verbatim. Headers are never logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True


class JsonLines(logging.Formatter):
    """One JSON object per line: ts, level, process, pid, logger, msg, the known FIELDS,
    and ``exc`` (the traceback text) when an exception is logged."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "process": getattr(record, "ovstream_process", None),
            "pid": record.process,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encoder.encode(line).decode()


@contextmanager
def fields(
    *, shard: int | str | None = None, session: str | None = None, commit_id: str | None = None
) -> Iterator[None]:
    """Every line logged in the block carries these fields (the ones given)."""
    shard_token = SHARD.set(shard) if shard is not None else None
    session_token = SESSION.set(session) if session is not None else None
    commit_token = COMMIT_ID.set(commit_id) if commit_id is not None else None
    try:
        yield
    finally:
        if commit_token is not None:
            COMMIT_ID.reset(commit_token)
        if session_token is not None:
            SESSION.reset(session_token)
        if shard_token is not None:
            SHARD.reset(shard_token)


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not the stream it was at
    setup: a CLI run inside a test (pytest swaps stderr per test and closes the old one) left
    every later record a "--- Logging error --- I/O operation on closed file" traceback."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure(process: str, *, level: str = "INFO", json_lines: bool = False) -> None:
    """Set up the root logger of a process (once, at its start)."""
    handler = _CurrentStderr()
    handler.addFilter(NoCredentials())
    handler.addFilter(ContextFields(process))
    handler.setFormatter(JsonLines() if json_lines else logging.Formatter(TEXT_FORMAT))
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:  # ours only: a test's stay
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx says INFO for every request (an OV health probe every 10 s): ovstream logs what matters
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))
