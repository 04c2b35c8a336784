"""The cluster tier: capture, commit and assemble tests again, on a real Redis Cluster.

``redis_cluster`` (tests/conftest.py) runs three cluster-enabled ``redis-server`` masters
for the whole test session. The test modules here import the
single-Redis tests they run again; the fixtures below put those tests' store on the cluster
(``redis_settings``, ``redis_client``) and their RQ commit queue on the plain
``redis_server`` (``queue_redis_url``), as RQ does not speak Redis Cluster. Every test here
is marked ``redis``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster

from tests.capture.conftest import fake_ov, fake_ov_url, settings  # noqa: F401 (fixtures of the imported tests)
from tests.conftest import cluster_store
from tests.rpc.conftest import commit_worker, fake, make_rpc, rpc  # noqa: F401
from workers.dev.local_redis import RedisClusterServers

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(_HERE):
            item.add_marker(pytest.mark.redis)


@pytest.fixture
def redis_settings(redis_url: str, redis_cluster: RedisClusterServers) -> dict[str, Any]:
    """The store on the cluster (flushed), the commit queue on the plain (flushed) ``redis_url``."""
    return cluster_store(redis_cluster, redis_url)


@pytest.fixture
def redis_client(redis_settings: dict[str, Any], redis_cluster: RedisClusterServers) -> Iterator[redis.Redis]:
    client = RedisCluster.from_url(redis_cluster.url)
    try:
        yield cast(redis.Redis, client)  # what the tests ask stays within one slot a call
    finally:
        client.close()
