"""The Redis layouts a deployment may name (core.config's checks of them): the store (one
Redis, Sentinel's master, or a Cluster), the RQ commit queue on the store or on Redis of its
own (``queueRedisUrl``, or several: ``queueRedisUrls``). Each check raises ``ValueError``
with the setting to change, which pydantic reports as the setting's error."""

from __future__ import annotations

from typing import Any

REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "fakeredis://")


def check_url(url: str) -> str:
    if not url.startswith(REDIS_SCHEMES):
        raise ValueError("must be a redis://, rediss://, unix:// or fakeredis:// URL")
    return url


def check_queue_urls(urls: tuple[str, ...]) -> tuple[str, ...]:
    for url in urls:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{url!r}: each must be a redis://, rediss:// or unix:// URL of a plain Redis")
    if len(set(urls)) != len(urls):
        raise ValueError("a Redis is listed twice")
    return urls


def check_sentinels(addresses: tuple[str, ...]) -> tuple[str, ...]:
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{address!r} is not host:port")
    return addresses


def check_layout(s: Any) -> None:
    """The settings' Redis, together (``s``: core.config.Settings)."""
    queue_own = s.queue_redis_url is not None or bool(s.queue_redis_urls)
    if s.redis_cluster:
        if not s.redis_url.startswith(("redis://", "rediss://")):
            raise ValueError("redisCluster: redisUrl must be a redis:// or rediss:// URL of a cluster node")
        if not queue_own:
            raise ValueError(
                "redisCluster: set queueRedisUrl to a plain (non-cluster) Redis for the RQ commit queue;"
                " RQ does not speak Redis Cluster"
            )
        if s.redis_sentinels:
            raise ValueError("redisSentinels: a Redis Cluster fails over by itself; set one of the two")
    if s.queue_redis_urls and s.queue_redis_url is not None:
        raise ValueError("queueRedisUrls: set it or queueRedisUrl, not both (one Redis is a list of one)")
    if s.queue_redis_urls and s.embedded_redis:
        raise ValueError("queueRedisUrls: the embedded Redis (fakeredis://) has one queue, in-process")
    if s.redis_sentinels and s.embedded_redis:
        raise ValueError("redisSentinels: redisUrl must be a redis:// or rediss:// URL, not the embedded one")
