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


_PARAM = re.compile(r"(?<![\w.-])([A-Za-z][\w.-]*)=([^&\s\"',;]+)")
"""``name=value`` in a query string, a form, a command line or a message."""
_QUOTED = re.compile(r"([\"'])([A-Za-z][\w.-]*)\1(\s*:\s*)([\"'])(.*?)\4")
"""``"name": "value"`` in JSON (or a Python dict's repr)."""
_HEADER = re.compile(r"(?<![\w.-])([A-Za-z][\w]*-[\w-]+)(:\s*)([^\s,;]+)")
"""``Header-Name: value`` (a header's name has a dash: ``X-Api-Key``)."""
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/\s@]*:)[^@\s/]+@")
"""The password of a URL's user part (``redis://:pw@host``)."""
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")
_CREDENTIAL_WORDS = frozenset(
    {"token", "key", "keys", "secret", "secrets", "password", "passwd", "pwd", "credential", "credentials"}
    | {"auth", "authorization"}
)
"""A name whose last word is one of these names a credential (``rpcToken``, ``api_key``, ``X-Auth``)."""
_RUN_TOGETHER = (
    *("apikey", "accesskey", "secretkey", "privatekey", "authkey"),
    *(w for w in sorted(_CREDENTIAL_WORDS) if w not in ("key", "keys")),
)
"""Ends of a name written in one word (``apikey``, ``rpctoken``); not ``key`` alone (``monkey``)."""
_NOT_CREDENTIALS = frozenset({("session", "key")})
"""Names that end like a credential's and are none: a session key names a conversation."""
REDACTED = "[redacted]"


def credential_name(name: str) -> bool:
    """Whether a parameter, field or header called ``name`` holds a credential: its last word
    (camelCase, snake_case, kebab-case or dotted, any case) is a credential's, or a run-together
    one ends so (``apikey``, ``rpctoken``); ``monkey`` is no key."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words or tuple(words[-2:]) in _NOT_CREDENTIALS:
        return False
    last: str = words[-1]
    return last in _CREDENTIAL_WORDS or last.endswith(_RUN_TOGETHER)


def redact(text: str) -> str:
    """``text`` with credential values left out: any ``name=value``, ``"name": "value"`` or
    ``Header-Name: value`` whose name is a credential's (``credential_name``), a URL's
    password, and ``Bearer``/``Basic`` credentials."""
    if "=" not in text and ":" not in text and " " not in text:
        return text

    def param(m: re.Match[str]) -> str:
        return f"{m.group(1)}={REDACTED}" if credential_name(m.group(1)) else m.group(0)

    def quoted(m: re.Match[str]) -> str:
        q, name, colon, vq = m.group(1), m.group(2), m.group(3), m.group(4)
        return f"{q}{name}{q}{colon}{vq}{REDACTED}{vq}" if credential_name(name) else m.group(0)

    def header(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}{REDACTED}" if credential_name(m.group(1)) else m.group(0)

    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", _URL_PASSWORD.sub(rf"\1{REDACTED}@", text))
    return _HEADER.sub(header, _QUOTED.sub(quoted, _PARAM.sub(param, text)))


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
