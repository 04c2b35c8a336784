"""Redis away, as every loop of ovstream meets it: which errors say Redis (or a cluster node)
is away for now (``redis_went_away``) and which are any failure of a Redis call
(``redis_failed``); and ``await_redis`` / ``wait_for_redis``: a process that starts before
Redis (or loses it) waits for it with backoff, one log line when it starts waiting and one when
Redis answers; a refused password is a configuration error (``RedisConfigError``), not
something to wait out. (``workers.store.connection`` re-exports these names.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

import redis
import redis.asyncio as aioredis
from redis.exceptions import ClusterError, OutOfMemoryError, RedisClusterException, TryAgainError

from core.backoff import Backoff
from core.config import Settings
from core.defaults import REDIS_WAIT_MAX_S, REDIS_WAIT_S
from workers.store.event_loop import traceback_files
from workers.store.tls_check import tls_problem

log = logging.getLogger("workers.store.connection")  # the lines an operator knows, as before the split


class RedisConfigError(RuntimeError):
    """Redis answers but refuses us (a wrong password or user): waiting will not help."""


def _unreachable_reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return "connection refused" if "refused" in text.lower() else text


class _Waiting:
    """The log lines of one wait for Redis: one when it starts, one when Redis answers."""

    def __init__(self, settings: Settings, who: str, url: str | None) -> None:
        self.settings, self.url = settings, url or settings.redis_url
        self.where = settings.redacted_redis_url(url)
        self.who = who
        self.failures = 0
        self.since: float | None = None

    def pauses(self, exc: BaseException, stopping: Callable[[], bool]) -> Iterator[float]:
        """The sleeps before the next PING after ``exc``, in tenths of a second so that a stop
        is heard at once; the wait doubles each time, up to REDIS_WAIT_MAX_S."""
        # An error reply is a refusal (a wrong password or user, no permission), except a
        # cluster's "not now" (CLUSTERDOWN, TRYAGAIN), which are error replies too.
        if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and not isinstance(exc, REDIS_AWAY)
        ):
            raise RedisConfigError(f"redis_url: Redis at {self.where} refuses us: {exc}") from None
        if self.since is None:
            problem = tls_problem(exc, self.settings, self.url)  # the same on every try: not an outage
            if problem is not None:
                raise RedisConfigError(problem) from None
            self.since = time.monotonic()
            log.warning("%s: waiting for Redis at %s: %s", self.who, self.where, _unreachable_reason(exc))
        self.failures += 1
        left = Backoff(REDIS_WAIT_S, REDIS_WAIT_MAX_S).delay(self.failures)
        while left > 0 and not stopping():
            yield min(left, 0.1)
            left -= 0.1

    def reached(self) -> None:
        if self.since is not None:
            log.info("%s: Redis reachable at %s (after %.1fs)", self.who, self.where, time.monotonic() - self.since)


REDIS_AWAY = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterError,
    TryAgainError,
    RedisClusterException,
    OutOfMemoryError,
)
"""Redis, or a part of a cluster, is away for now (down, restarting, failing over, its slots
moving, or full: ``maxmemory`` reached under ``noeviction`` refuses every write until capture's
acks and trims, or an operator, make room): what a loop waits out and tries again."""
REDIS_ERRORS = (redis.RedisError, RedisClusterException)
"""Any failure of a Redis call; a cluster client's ``RedisClusterException`` (no node reachable,
a slot no node serves) is not a ``RedisError``."""


_REDIS_ASYNC_CONNECTION = "redis/asyncio/connection.py"


def leaked_by_redis_py(exc: BaseException) -> bool:
    """An ``AttributeError``/``TypeError`` (asyncio) or ``RuntimeError`` (uvloop: "unable to
    perform operation on <TCPTransport closed=True>") raised in redis-py's asyncio connection
    while it wrote to a connection the peer had closed (a restarted cluster node, say): redis-py
    8.1 lets these escape instead of a ``ConnectionError`` (redis/redis-py#4287)."""
    return isinstance(exc, AttributeError | TypeError | RuntimeError) and any(
        file.endswith(_REDIS_ASYNC_CONNECTION) for file in traceback_files(exc)
    )


_FAILING_OVER = ("UNBLOCKED", "READONLY", "LOADING", "MASTERDOWN")
"""Error replies of a node changing roles or starting: a blocked read force-unblocked by a
failover (``CLUSTER FAILOVER TAKEOVER``), a write to a master just demoted to a replica, a
node loading its data, a replica whose master is gone."""


_PIPELINE_ERROR = " of pipeline caused error: "


def failing_over(exc: BaseException) -> bool:
    """``exc`` is an error reply of a node changing roles or starting (``_FAILING_OVER``), to
    a command alone or in a pipeline (redis-py puts "Command # n (...) of pipeline caused
    error: " before the reply)."""
    if not isinstance(exc, redis.ResponseError):
        return False
    return str(exc).rpartition(_PIPELINE_ERROR)[2].startswith(_FAILING_OVER)


def redis_went_away(exc: BaseException) -> bool:
    """``exc`` says Redis (or a cluster node) is away for now: ``REDIS_AWAY``, a failover's
    error replies (``failing_over``), or the same fault as redis-py leaks it
    (``leaked_by_redis_py``)."""
    return isinstance(exc, REDIS_AWAY) or failing_over(exc) or leaked_by_redis_py(exc)


def redis_failed(exc: BaseException) -> bool:
    """``exc`` is any failure of a Redis call: ``REDIS_ERRORS``, or one redis-py leaks."""
    return isinstance(exc, REDIS_ERRORS) or leaked_by_redis_py(exc)


_UNREACHABLE = (*REDIS_AWAY, OSError)
"""What waiting for Redis may outlast."""


async def await_redis(
    client: aioredis.Redis,
    settings: Settings,
    who: str,
    stopping: Callable[[], bool] = lambda: False,
    *,
    url: str | None = None,
) -> bool:
    """Wait until Redis (at ``url``, default the store's) answers PING (True), or ``stopping()`` (False)."""
    waiting = _Waiting(settings, who, url)
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
    client: redis.Redis,
    settings: Settings,
    who: str,
    stopping: Callable[[], bool] = lambda: False,
    *,
    url: str | None = None,
) -> bool:
    """``await_redis`` for a sync client."""
    waiting = _Waiting(settings, who, url)
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
