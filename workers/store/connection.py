"""Redis connections from Settings.

``redis_url = "fakeredis://"`` embeds Redis: every connection made in this
process, sync or asyncio, talks to one shared in-memory ``FakeServer``, so
capture, the RQ worker and the RPC of ``ovstream up`` see the same data
without a redis-server. Any other URL goes to ``redis.Redis.from_url``, or with
``redis_cluster`` to redis-py's cluster client, which routes each command by its key's slot,
or with ``redis_sentinels`` to the master the Sentinels name (``workers.store.sentinel``).

Two Redis roles: the *store* (streams, session records, leases: ``connect`` /
``connect_async``) and the RQ commit *queue* (``queue_client``). They are one server unless
``queue_redis_url`` says otherwise; with Redis Cluster they must be two, as RQ's keys carry
no hash tags and its scripts span keys.

RQ needs raw bytes (``decode_responses=False``); so does everything here.

Redis away, and waiting for it: workers.store.outages (its names are re-exported here, where
every caller has long imported them from).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster
from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.typing import EncodableT, FieldT

from core.config import Settings
from core.defaults import REDIS_FAIL_FAST_CONNECT_TIMEOUT_S as FAIL_FAST_CONNECT_TIMEOUT_S
from core.defaults import REDIS_FAIL_FAST_TIMEOUT_S as FAIL_FAST_TIMEOUT_S
from core.defaults import REDIS_POOL_SIZE, REDIS_POOL_WAIT_S
from core.defaults import REDIS_SOCKET_TIMEOUT_MARGIN_S as SOCKET_TIMEOUT_MARGIN_S
from workers.store.outages import (  # re-exported: every caller imports them from here
    REDIS_AWAY,
    REDIS_ERRORS,
    RedisConfigError,
    await_redis,
    failing_over,
    leaked_by_redis_py,
    redis_failed,
    redis_went_away,
    wait_for_redis,
)
from workers.store.sentinel import async_sentinel_pool, sentinel_pool

if TYPE_CHECKING:
    import fakeredis

log = logging.getLogger(__name__)

_fake_server: fakeredis.FakeServer | None = None
_fake_server_lock = threading.Lock()
EMBEDDED_EXTRA_MISSING = (
    "redis_url fakeredis:// (embedded Redis) needs the embedded extra: pip install 'ovstream[embedded]'"
)


def _fakeredis() -> Any:
    """The fakeredis module: an extra (``ovstream[embedded]``), for ``./run`` and tests, not
    the production image."""
    try:
        import fakeredis
    except ImportError as exc:
        raise RedisConfigError(EMBEDDED_EXTRA_MISSING) from exc
    return fakeredis


def fake_server() -> fakeredis.FakeServer:
    """The process-wide in-memory server behind every ``fakeredis://`` connection."""
    global _fake_server
    with _fake_server_lock:
        if _fake_server is None:
            _fake_server = _fakeredis().FakeServer()
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


def _tls(settings: Settings, url: str) -> dict[str, Any]:
    """TLS options of a ``rediss://`` URL: the CA that verifies the server, and a client
    certificate when Redis asks for one (``tls-auth-clients``)."""
    if not url.startswith("rediss://"):
        return {}
    options: dict[str, Any] = {"ssl_cert_reqs": "required"}
    if settings.redis_ca_file:
        options["ssl_ca_certs"] = settings.redis_ca_file
    if settings.redis_cert_file:
        options["ssl_certfile"] = settings.redis_cert_file
        options["ssl_keyfile"] = settings.redis_key_file
    return options


def _options(settings: Settings, block_ms: int | None, fail_fast: bool) -> dict[str, Any]:
    if fail_fast:
        # redis-py's default retries with back-off for seconds, and every request in flight
        # would wait that long: one immediate retry (a pooled connection gone stale after a
        # restart) and short timeouts let a caller that has a fallback take it at once.
        timeouts: dict[str, float | None] = {
            "socket_connect_timeout": FAIL_FAST_CONNECT_TIMEOUT_S,
            "socket_timeout": FAIL_FAST_TIMEOUT_S,
        }
    else:
        timeouts = {"socket_timeout": _socket_timeout(block_ms)}
    return {**timeouts, **_tls(settings, settings.redis_url)}


# The cluster clients are typed as the plain ones they stand in for: they speak the same
# commands (both are redis-py's command mixins), and every multi-key call here stays in one
# hash-tagged slot (workers.store.keys), which is all the cluster client asks of its callers.


def _pool_wait_s(fail_fast: bool) -> float:
    return FAIL_FAST_TIMEOUT_S if fail_fast else REDIS_POOL_WAIT_S


def connect(
    settings: Settings,
    *,
    block_ms: int | None = None,
    fail_fast: bool = False,
    max_connections: int = REDIS_POOL_SIZE,
) -> redis.Redis:
    """A sync store client for ``settings.redis_url``; ``block_ms`` = longest blocking read it
    will do; ``fail_fast``: short timeouts and one immediate retry (the RPC's). At most
    ``max_connections`` (per cluster node); a caller past them waits for one."""
    if settings.embedded_redis:
        return cast(redis.Redis, _fakeredis().FakeRedis(server=fake_server()))
    options = _options(settings, block_ms, fail_fast)
    if settings.redis_cluster:
        retry = {"retry": Retry(NoBackoff(), 1)} if fail_fast else {}
        url = settings.redis_url

        def make() -> redis.cluster.RedisCluster:
            return redis.cluster.RedisCluster.from_url(url, max_connections=max_connections, **options, **retry)

        return cast(redis.Redis, LazyCluster(make))
    if fail_fast:  # the pool's connections take it (redis-py's set_retry fails on a blocking pool)
        options["retry"] = Retry(NoBackoff(), 1)
    if settings.redis_sentinels:
        sentinel = sentinel_pool(settings, max_connections=max_connections, wait_s=_pool_wait_s(fail_fast), **options)
        return redis.Redis.from_pool(sentinel)
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=_pool_wait_s(fail_fast), **options
    )
    return redis.Redis.from_pool(pool)


def connect_async(
    settings: Settings,
    *,
    block_ms: int | None = None,
    fail_fast: bool = False,
    max_connections: int = REDIS_POOL_SIZE,
) -> aioredis.Redis:
    """An asyncio store client for ``settings.redis_url`` (same embedded server for
    ``fakeredis://``); the arguments as ``connect``'s. A cluster client cannot wait for a
    connection (redis-py raises past ``max_connections`` per node): its callers keep their
    concurrency under it."""
    if settings.embedded_redis:
        return cast(aioredis.Redis, _fakeredis().FakeAsyncRedis(server=fake_server()))
    options = _options(settings, block_ms, fail_fast)
    if settings.redis_cluster:
        retry = {"retry": AsyncRetry(NoBackoff(), 1)} if fail_fast else {}
        cluster = aiocluster.RedisCluster.from_url(
            settings.redis_url, max_connections=max_connections, **options, **retry
        )
        cluster.commands_parser = KeptCommandTable()
        return cast(aioredis.Redis, cluster)
    if fail_fast:
        options["retry"] = AsyncRetry(NoBackoff(), 1)
    if settings.redis_sentinels:
        wait_s = _pool_wait_s(fail_fast)
        return aioredis.Redis.from_pool(
            async_sentinel_pool(settings, max_connections=max_connections, wait_s=wait_s, **options)
        )
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=_pool_wait_s(fail_fast), **options
    )
    return aioredis.Redis.from_pool(pool)


class KeptCommandTable(AsyncCommandsParser):
    """redis-py's asyncio cluster client (8.1) asks its default node for the command table
    (``COMMAND``) every time it refreshes its slot map, and a refresh makes the first master of
    the new map the default node. A master that died and has not failed over yet is still in
    the map, first when it serves the lowest slots: every refresh then fails, and every command
    of the client with it, whichever node it is for (capture stalled on every shard until the
    replica took over). The table never changes while the client lives: asked once, kept.

    The same default node is asked for the keys of a command whose keys move (``COMMAND
    GETKEYS``): XREAD, capture's blocking read, would fail on every shard too. Its keys are
    read here instead (the first half of what follows ``STREAMS``), one round trip fewer."""

    async def initialize(self, node: aiocluster.ClusterNode | None = None) -> None:
        if self.commands:
            if node is not None:
                self.node = node
            return
        await super().initialize(node)

    async def get_keys(self, *args: Any) -> tuple[Any, ...] | None:
        if args and text(args[0]).upper() in ("XREAD", "XREADGROUP"):
            words = [text(a).upper() for a in args]
            if "STREAMS" in words:
                rest = args[words.index("STREAMS") + 1 :]
                return tuple(rest[: len(rest) // 2])
        return await super().get_keys(*args)


class LazyCluster:
    """A sync ``RedisCluster`` made on first use. Its constructor connects (it asks a node for
    the slot map), and a process that starts before the cluster must be able to wait for it
    (``wait_for_redis``) rather than die in its constructor; each use before the cluster
    answers raises as a call would."""

    def __init__(self, make: Callable[[], redis.cluster.RedisCluster]) -> None:
        self._make = make
        self._client: redis.cluster.RedisCluster | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return getattr(client, name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


_queue_clients: dict[str, redis.Redis] = {}
_queue_clients_lock = threading.Lock()


def queue_client(store: redis.Redis, settings: Settings, index: int = 0) -> redis.Redis:
    """The client of the RQ commit queue (of queue ``index``: ``queue_redis_urls``), for code
    holding a store client: ``store`` itself when the queue shares its (plain) server, else
    this process's one client of that Redis (thread-safe, as redis-py clients are)."""
    url = settings.queue_urls[index]
    if settings.embedded_redis or (url == settings.redis_url and not settings.redis_cluster):
        return store
    with _queue_clients_lock:
        client = _queue_clients.get(url)
        if client is None:
            # No socket timeout, as the store's (``_options``): redis-py's default of 5 s would stay
            # on the connections made before RQ raises it for its blocking dequeue (RQ updates
            # only the pool's kwargs), and an idle worker's BLMOVE then timed out every 5 s.
            pool = redis.BlockingConnectionPool.from_url(
                url,
                max_connections=REDIS_POOL_SIZE,
                timeout=REDIS_POOL_WAIT_S,
                socket_timeout=_socket_timeout(None),
                **_tls(settings, url),
            )
            client = _queue_clients[url] = redis.Redis.from_pool(pool)
        return client


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


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``ms-seq``) as the pair it orders by."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def consumer_group(info: Any, name: str) -> dict[str, Any] | None:
    """Group ``name`` of an XINFO GROUPS reply (None when absent, or when the reply is an error)."""
    if isinstance(info, list):
        for group in info:
            if text(group.get("name")) == name:
                return dict(group)
    return None


def stream_entries(reply: object) -> list[StreamEntry]:
    """XRANGE / XREVRANGE entries (redis-py types replies loosely; ours are bytes, never None)."""
    return cast(list[StreamEntry], reply or [])


__all__ = [
    "REDIS_AWAY",
    "REDIS_ERRORS",
    "RedisConfigError",
    "await_redis",
    "connect",
    "connect_async",
    "consumer_group",
    "failing_over",
    "fake_server",
    "leaked_by_redis_py",
    "optional_text",
    "queue_client",
    "redis_failed",
    "redis_went_away",
    "reset_fake_server",
    "stream_entries",
    "stream_id",
    "text",
    "wait_for_redis",
]
