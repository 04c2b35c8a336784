"""workers.store.sentinel: the pools behind ``redisSentinels`` (the failover itself: tests/cluster)."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from core.config import Settings
from workers.store.connection import connect, connect_async
from workers.store.sentinel import AsyncBlockingSentinelPool, BlockingSentinelPool

SETTINGS = Settings(
    redis_url="rediss://ovs:s3cret@ignored:1/3",
    redis_sentinels=("127.0.0.1:26379", "10.0.0.2:26380"),
    redis_master_name="main-redis",
)


def test_both_clients_ask_the_sentinels_for_the_named_master_with_the_urls_credentials() -> None:
    sync_pool = connect(SETTINGS, max_connections=7).connection_pool
    async_pool = connect_async(SETTINGS, max_connections=7).connection_pool
    assert isinstance(sync_pool, BlockingSentinelPool) and isinstance(async_pool, AsyncBlockingSentinelPool)
    for pool in (sync_pool, async_pool):
        assert pool.service_name == "main-redis"
        asked = [c.connection_pool.connection_kwargs for c in pool.sentinel_manager.sentinels]
        assert [(a["host"], a["port"]) for a in asked] == SETTINGS.sentinel_addresses
        kwargs = pool.connection_kwargs
        assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (3, "ovs", "s3cret")
        assert "ignored" not in str(kwargs)  # the URL's host is the Sentinels' to say
        assert pool.max_connections == 7
    # a caller past the cap waits for a connection (the blocking pool's), where redis-py's
    # Sentinel pool would fail it with "Too many connections"
    assert isinstance(sync_pool, redis.BlockingConnectionPool)
    assert isinstance(async_pool, aioredis.BlockingConnectionPool)
