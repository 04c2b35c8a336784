"""Redis behind Sentinels: pools that ask the Sentinels where the master is.

With ``redis_sentinels`` every connection ovstream opens (store and, when it shares the
store, the RQ queue) is made by a pool that asks the Sentinels for the current master of
``redis_master_name`` first. When the Sentinels fail the master over, connections to the old
one break (it died) or are refused (it came back as a replica: READONLY, or a blocked read
force-unblocked), redis-py drops them, and the next one goes to the promoted replica: to
ovstream a Sentinel failover looks like a short Redis outage, which every process already
waits out. The pools block a caller past ``max_connections`` until a connection is free, as
the plain ones here do (redis-py's Sentinel pool would raise instead).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from redis.connection import parse_url

from core.config import Settings

SENTINEL_TIMEOUT_S = 2.0
"""How long a Sentinel may take to say where the master is before the next one is asked."""


class BlockingSentinelPool(redis.sentinel.SentinelConnectionPool, redis.BlockingConnectionPool):
    """redis-py's Sentinel pool with the blocking pool's cap: a caller waits for a connection."""


class AsyncBlockingSentinelPool(aiosentinel.SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The asyncio one."""


def _master_options(settings: Settings) -> dict[str, Any]:
    """What ``redis_url`` says of the master besides where it is: database, user, password, TLS."""
    parsed = parse_url(settings.redis_url)
    options = {k: v for k, v in parsed.items() if k in ("db", "username", "password")}
    if settings.redis_url.startswith("rediss://"):
        options["ssl"] = True
    return options


def sentinel_pool(settings: Settings, *, max_connections: int, wait_s: float, **options: Any) -> BlockingSentinelPool:
    """A sync pool of connections to the Sentinels' master (``options``: connection options)."""
    sentinels = redis.sentinel.Sentinel(
        settings.sentinel_addresses, sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S}
    )
    return BlockingSentinelPool(  # type: ignore[no-untyped-call]
        settings.redis_master_name,
        sentinels,
        max_connections=max_connections,
        timeout=wait_s,
        **_master_options(settings),
        **options,
    )


def async_sentinel_pool(
    settings: Settings, *, max_connections: int, wait_s: float, **options: Any
) -> AsyncBlockingSentinelPool:
    """The asyncio pool."""
    sentinels = aiosentinel.Sentinel(
        settings.sentinel_addresses, sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S}
    )
    return AsyncBlockingSentinelPool(  # type: ignore[no-untyped-call]
        settings.redis_master_name,
        sentinels,
        max_connections=max_connections,
        timeout=wait_s,
        **_master_options(settings),
        **options,
    )
