"""Session fixtures shared by every test tier.

``redis_server`` starts a real ``redis-server`` on a free loopback port for the
whole test session and stops it at the end; tests marked ``redis`` use it via
``redis_url`` / ``redis_client`` (flushed before each test), and ``redis_settings``.
"""

from __future__ import annotations

import resource
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import settings as hypothesis_settings
from redis.cluster import RedisCluster

from tests.helpers.tls import Pki, TlsRedis, make_pki
from workers.dev.local_redis import (  # noqa: F401 (free_port for tests)
    LocalRedisError,
    RedisClusterServers,
    free_port,
    start_redis_cluster,
    start_redis_server,
)

hypothesis_settings.register_profile("ovstream", deadline=None)
hypothesis_settings.load_profile("ovstream")
"""No property test is timed (hypothesis's default deadline is 200 ms an example): on a busy
machine an example took 303 ms and failed a fairness test that asserts nothing of speed. Speed
is measured in bench/, not asserted here."""

_CPU_AT_SETUP = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    """CPU this pytest process and the children it has waited for have used (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each test's CPU (setup to teardown, with the servers it started and stopped) as a JUnit
    property ``cpu_s``: scripts/lanes.py lists the tests that cost the machine most."""
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        item.user_properties.append(("cpu_s", f"{_cpu_seconds() - item.stash[_CPU_AT_SETUP]:.2f}"))
    yield


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server); .ci/run installs it")
    try:
        server = start_redis_server()
    except LocalRedisError as exc:
        pytest.fail(str(exc))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """Three cluster-enabled ``redis-server`` masters joined by ``redis-cli --cluster create``,
    for the whole test session (the cluster and slow tiers)."""
    try:
        cluster = start_redis_cluster(masters=3)
    except LocalRedisError as exc:
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


def cluster_store(cluster: RedisClusterServers, queue_url: str) -> dict[str, Any]:
    """Settings putting the store on ``cluster`` (flushed) and the RQ queue on ``queue_url``."""
    client = RedisCluster.from_url(cluster.url)
    try:
        client.flushall(target_nodes=RedisCluster.PRIMARIES)
    finally:
        client.close()
    return {"redis_url": cluster.url, "redis_cluster": True, "queue_redis_url": queue_url}


@pytest.fixture
def redis_url(redis_server: str) -> str:
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    return redis_server


@pytest.fixture
def redis_settings(redis_url: str) -> dict[str, Any]:
    """The Redis part of the tiers' Settings (tests/cluster puts the store on a cluster)."""
    return {"redis_url": redis_url}


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA with a server and a client certificate (tests/helpers/tls.py)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_redis(pki: Pki) -> Iterator[TlsRedis]:
    """A TLS-only redis-server that requires client certificates."""
    server = TlsRedis(pki)
    try:
        yield server
    finally:
        server.stop()
