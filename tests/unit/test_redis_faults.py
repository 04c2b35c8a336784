"""Which exceptions mean "Redis is away for now" (workers.store.connection.redis_went_away)."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ClusterDownError, RedisClusterException

from core.config import Settings
from tests.helpers.redis_faults import REDIS_CONNECTION, raised_in
from workers.store.connection import (
    KeptCommandTable,
    RedisConfigError,
    leaked_by_redis_py,
    redis_failed,
    redis_went_away,
    wait_for_redis,
)

PIPELINE_FAILED = "Command # 2 (WAIT 1 1000) of pipeline caused error: "
"""How redis-py puts a reply to one command of a pipeline."""


@pytest.mark.parametrize(
    ("exc", "leaked", "away"),
    [
        (raised_in(REDIS_CONNECTION, AttributeError("'NoneType' object has no attribute 'writelines'")), True, True),
        (raised_in(REDIS_CONNECTION, TypeError("'NoneType' object is not callable")), True, True),
        (
            raised_in(REDIS_CONNECTION, RuntimeError("unable to perform operation on <TCPTransport closed=True>")),
            True,
            True,
        ),
        (raised_in("/src/workers/capture/shard.py", AttributeError("a bug of ours")), False, False),
        (raised_in(REDIS_CONNECTION, KeyError("not a transport fault")), False, False),
        (redis.ConnectionError("refused"), False, True),
        (ClusterDownError("The cluster is down"), False, True),
        (RedisClusterException("no node reachable"), False, True),
        (redis.ResponseError("WRONGTYPE"), False, False),
        (redis.ResponseError("UNBLOCKED force unblock from blocking operation, instance state changed"), False, True),
        (redis.ResponseError("READONLY You can't write against a read only replica."), False, True),
        (redis.ResponseError(f"{PIPELINE_FAILED}UNBLOCKED force unblock"), False, True),
        (redis.ResponseError(f"{PIPELINE_FAILED}WRONGTYPE"), False, False),
        (redis.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), False, True),
    ],
    ids=[
        "writer-gone",
        "write-ready-gone",
        "uvloop-transport-closed",
        "our-bug",
        "other-error-in-redis",
        "refused",
        "clusterdown",
        "no-node",
        "wrongtype",
        "failover-unblocked",
        "demoted-master",
        "failover-in-a-pipeline",
        "wrongtype-in-a-pipeline",
        "full",
    ],
)
def test_redis_went_away(exc: BaseException, leaked: bool, away: bool) -> None:
    assert leaked_by_redis_py(exc) is leaked
    assert redis_went_away(exc) is away


@pytest.mark.parametrize(
    ("exc", "failed"),
    [
        (raised_in(REDIS_CONNECTION, AttributeError("'NoneType' object has no attribute 'writelines'")), True),
        (raised_in("/src/workers/rpc/assemble.py", AttributeError("a bug of ours")), False),
        (redis.ResponseError("WRONGTYPE"), True),  # a failure, though not one to wait out
        (RedisClusterException("no node reachable"), True),
        (ValueError("not Redis"), False),
    ],
    ids=["writer-gone", "our-bug", "wrongtype", "no-node", "not-redis"],
)
def test_redis_failed(exc: BaseException, failed: bool) -> None:
    assert redis_failed(exc) is failed


@pytest.mark.parametrize(
    ("exc", "refused"),
    [
        (redis.AuthenticationError("WRONGPASS invalid username-password pair"), True),
        (ClusterDownError("The cluster is down"), False),  # a cluster starting, or a master restarting
        (redis.ConnectionError("Connection refused"), False),
    ],
    ids=["wrong-password", "cluster-down", "refused"],
)
def test_waiting_for_redis_outlasts_a_down_cluster_but_not_a_refusal(exc: BaseException, refused: bool) -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    if refused:
        with pytest.raises(RedisConfigError, match="refuses us"):
            wait_for_redis(_Failing(exc), settings, "test")
    else:
        pings: list[int] = []
        assert not wait_for_redis(_Failing(exc, pings), settings, "test", stopping=lambda: len(pings) >= 2)
        assert len(pings) == 2  # it kept asking


class _Failing:
    """A client whose PING always fails with ``exc``."""

    def __init__(self, exc: BaseException, pings: list[int] | None = None) -> None:
        self.exc, self.pings = exc, pings if pings is not None else []

    def ping(self) -> bool:
        self.pings.append(1)
        raise self.exc


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        (("XREAD", "COUNT", 1, "BLOCK", 100, "STREAMS", "a{s1}", "0-0"), ("a{s1}",)),
        (("xread", "STREAMS", "a", "b", "1-0", "2-0"), ("a", "b")),
        ((b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", 5, b"STREAMS", b"s", b">"), (b"s",)),
    ],
)
async def test_the_cluster_client_reads_a_stream_reads_keys_itself(args: tuple, keys: tuple) -> None:
    """No ``COMMAND GETKEYS`` round trip to a default node that may be a dead master."""
    assert await KeptCommandTable().get_keys(*args) == keys
