"""Which exceptions mean "Redis is away for now" (workers.store.connection.redis_went_away)."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ClusterDownError, RedisClusterException

from workers.store.connection import leaked_by_redis_py, redis_went_away


def _raised_in(filename: str, exc: BaseException) -> BaseException:
    """``exc`` as raised by code of ``filename`` (its frame in the traceback)."""
    try:
        exec(compile("raise exc", filename, "exec"), {"exc": exc})
    except BaseException as raised:
        return raised
    raise AssertionError("not raised")


REDIS_CONNECTION = "/venv/lib/python3.11/site-packages/redis/asyncio/connection.py"


@pytest.mark.parametrize(
    ("exc", "leaked", "away"),
    [
        (_raised_in(REDIS_CONNECTION, AttributeError("'NoneType' object has no attribute 'writelines'")), True, True),
        (_raised_in(REDIS_CONNECTION, TypeError("'NoneType' object is not callable")), True, True),
        (
            _raised_in(REDIS_CONNECTION, RuntimeError("unable to perform operation on <TCPTransport closed=True>")),
            True,
            True,
        ),
        (_raised_in("/src/workers/capture/shard.py", AttributeError("a bug of ours")), False, False),
        (_raised_in(REDIS_CONNECTION, KeyError("not a transport fault")), False, False),
        (redis.ConnectionError("refused"), False, True),
        (ClusterDownError("The cluster is down"), False, True),
        (RedisClusterException("no node reachable"), False, True),
        (redis.ResponseError("WRONGTYPE"), False, False),
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
    ],
)
def test_redis_went_away(exc: BaseException, leaked: bool, away: bool) -> None:
    assert leaked_by_redis_py(exc) is leaked
    assert redis_went_away(exc) is away
