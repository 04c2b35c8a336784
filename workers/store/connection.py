"""Redis connections from Settings.

``redis_url = "fakeredis://"`` embeds Redis: every connection made in this
process, sync or asyncio, talks to one shared in-memory ``FakeServer``, so
capture, the RQ worker and the RPC of ``ovstream up`` see the same data
without a redis-server. Any other URL goes to ``redis.Redis.from_url``.

RQ needs raw bytes (``decode_responses=False``); so does everything here.

``await_redis`` / ``wait_for_redis``: a process that starts before Redis (or loses it) waits
for it with backoff, one log line when it starts waiting and one when Redis answers; a
refused password is a configuration error (``RedisConfigError``), not something to wait out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import fakeredis
import redis
import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from core.config import Settings
from core.defaults import REDIS_SOCKET_TIMEOUT_MARGIN_S as SOCKET_TIMEOUT_MARGIN_S
from core.defaults import REDIS_WAIT_MAX_S, REDIS_WAIT_S

log = logging.getLogger(__name__)

_fake_server: fakeredis.FakeServer | None = None
_fake_server_lock = threading.Lock()


def fake_server() -> fakeredis.FakeServer:
    """The process-wide in-memory server behind every ``fakeredis://`` connection."""
    global _fake_server
    with _fake_server_lock:
        if _fake_server is None:
            _fake_server = fakeredis.FakeServer()
        return _fake_server


def reset_fake_server() -> None:
    """Forget the embedded server's data (tests)."""
    global _fake_server
    with _fake_server_lock:
        _fake_server = None


def _socket_timeout(block_ms: int | None) -> float | None:
    # A blocking read must return before the socket gives up on it; without a
    # declared block time (RQ's BLMOVE waits for minutes) leave it unbounded.
    if block_ms is None:
        return None
    return block_ms / 1000 + SOCKET_TIMEOUT_MARGIN_S


def _tls(settings: Settings) -> dict[str, Any]:
    """TLS options of a ``rediss://`` URL: the CA that verifies the server, and a client
    certificate when Redis asks for one (``tls-auth-clients``)."""
    if not settings.redis_url.startswith("rediss://"):
        return {}
    options: dict[str, Any] = {"ssl_cert_reqs": "required"}
    if settings.redis_ca_file:
        options["ssl_ca_certs"] = settings.redis_ca_file
    if settings.redis_cert_file:
        options["ssl_certfile"] = settings.redis_cert_file
        options["ssl_keyfile"] = settings.redis_key_file
    return options


def connect(settings: Settings, *, block_ms: int | None = None) -> redis.Redis:
    """A sync client for ``settings.redis_url``; ``block_ms`` = longest blocking read it will do."""
    if settings.embedded_redis:
        return fakeredis.FakeRedis(server=fake_server())
    return redis.Redis.from_url(settings.redis_url, socket_timeout=_socket_timeout(block_ms), **_tls(settings))


def connect_async(settings: Settings, *, block_ms: int | None = None) -> aioredis.Redis:
    """An asyncio client for ``settings.redis_url`` (same embedded server for ``fakeredis://``)."""
    if settings.embedded_redis:
        return fakeredis.FakeAsyncRedis(server=fake_server())
    return aioredis.Redis.from_url(settings.redis_url, socket_timeout=_socket_timeout(block_ms), **_tls(settings))


def text(value: object) -> str:
    """A reply value as text: the clients here speak bytes (UTF-8; undecodable bytes replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def optional_text(value: object) -> str | None:
    """``text``, keeping a missing value (None) missing."""
    return None if value is None else text(value)


Fields = dict[FieldT, EncodableT]
"""Hash or stream entry fields as written (HSET mapping=, XADD)."""

StreamEntry = tuple[bytes, dict[bytes, bytes]]
"""One stream entry as the bytes clients here return it: (id, fields)."""


def stream_entries(reply: object) -> list[StreamEntry]:
    """XRANGE / XREVRANGE entries (redis-py types replies loosely; ours are bytes, never None)."""
    return cast(list[StreamEntry], reply or [])


class RedisConfigError(RuntimeError):
    """Redis answers but refuses us (a wrong password or user): waiting will not help."""


def _unreachable_reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return "connection refused" if "refused" in text.lower() else text


class _Waiting:
    """The log lines of one wait for Redis: one when it starts, one when Redis answers."""

    def __init__(self, settings: Settings, who: str) -> None:
        self.where = settings.redacted_redis_url()
        self.who = who
        self.delay = REDIS_WAIT_S
        self.since: float | None = None

    def pauses(self, exc: BaseException, stopping: Callable[[], bool]) -> Iterator[float]:
        """The sleeps before the next PING after ``exc``, in tenths of a second so that a stop
        is heard at once; the wait doubles each time, up to REDIS_WAIT_MAX_S."""
        if isinstance(exc, redis.AuthenticationError | redis.ResponseError):
            raise RedisConfigError(f"redis_url: Redis at {self.where} refuses us: {exc}") from None
        if self.since is None:
            self.since = time.monotonic()
            log.warning("%s: waiting for Redis at %s: %s", self.who, self.where, _unreachable_reason(exc))
        left, self.delay = self.delay, min(REDIS_WAIT_MAX_S, self.delay * 2)
        while left > 0 and not stopping():
            yield min(left, 0.1)
            left -= 0.1

    def reached(self) -> None:
        if self.since is not None:
            log.info("%s: Redis reachable at %s (after %.1fs)", self.who, self.where, time.monotonic() - self.since)


_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, OSError)


async def await_redis(
    client: aioredis.Redis, settings: Settings, who: str, stopping: Callable[[], bool] = lambda: False
) -> bool:
    """Wait until Redis answers PING (True), or ``stopping()`` (False)."""
    waiting = _Waiting(settings, who)
    while not stopping():
        try:
            await client.ping()
        except _UNREACHABLE as exc:
            for pause in waiting.pauses(exc, stopping):
                await asyncio.sleep(pause)
            continue
        waiting.reached()
        return True
    return False


def wait_for_redis(
    client: redis.Redis, settings: Settings, who: str, stopping: Callable[[], bool] = lambda: False
) -> bool:
    """``await_redis`` for a sync client."""
    waiting = _Waiting(settings, who)
    while not stopping():
        try:
            client.ping()
        except _UNREACHABLE as exc:
            for pause in waiting.pauses(exc, stopping):
                time.sleep(pause)
            continue
        waiting.reached()
        return True
    return False
