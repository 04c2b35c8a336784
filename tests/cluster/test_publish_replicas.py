"""publishReplicas: a turn counts as published only once that many replicas hold it (WAIT).

On a real master with a real replica (and on a cluster whose masters have one each): with
``publish_replicas = 1`` a publish returns once the replica has the entry; when no replica
confirms it in time the publish raises ``NotReplicated`` (the caller sends it again) instead
of acknowledging a turn a failover could lose; with 0 the master's reply is enough, replica
or not, which is what a failover can lose.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from core.config import Settings
from core.session import shard_of
from tests.cluster.test_cluster_failover import _node, _replica_of
from tests.helpers.chaos import chaos_turn
from tests.helpers.e2e import unique
from workers.dev.local_redis import RedisServer, follow, start_redis_cluster, start_redis_server
from workers.store.connection import connect
from workers.store.keys import Keys
from workers.store.streams import NotReplicated, publish_turn


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    master, replica = start_redis_server(), start_redis_server()
    try:
        follow(replica, master)
        yield master, replica
    finally:
        replica.stop()
        master.stop()


def _entries(url: str, stream: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return [fields[b"e"] for _, fields in client.xrange(stream)]
    finally:
        client.close()


def test_a_publish_returns_once_the_replica_holds_the_turn(pair: tuple[RedisServer, RedisServer]) -> None:
    master, replica = pair
    settings = Settings(redis_url=master.url, key_prefix=unique("rep"), shards=1, publish_replicas=1)
    client = connect(settings)
    stream = Keys(settings.key_prefix).stream(0)
    try:
        for n in range(20):
            publish_turn(client, settings, chaos_turn("s", n))
            # read right after the publish returned, from the replica: already there
            assert len(_entries(replica.url, stream)) == n + 1
    finally:
        client.close()


def test_a_turn_no_replica_confirms_is_not_acknowledged(pair: tuple[RedisServer, RedisServer]) -> None:
    master, replica = pair
    settings = Settings(
        redis_url=master.url,
        key_prefix=unique("rep"),
        shards=1,
        publish_replicas=1,
        publish_replicas_timeout_ms=200,
    )
    unreplicated = settings.model_copy(update={"publish_replicas": 0})
    client = connect(settings)
    follow(replica, None)  # the replica stops following: the master has none
    try:
        with pytest.raises(NotReplicated, match="0 of 1 replica"):
            publish_turn(client, settings, chaos_turn("s", 0))
        # 0: acknowledged by the master alone; a failover now would lose it
        publish_turn(client, unreplicated, chaos_turn("s", 1))
    finally:
        follow(replica, master)
    try:
        # sent again: now confirmed (given the time a loaded machine's replica takes to answer)
        patient = settings.model_copy(update={"publish_replicas_timeout_ms": 10_000})
        publish_turn(client, patient, chaos_turn("s", 0))
    finally:
        client.close()
    # three: the unconfirmed first try is on the stream too (capture drops the copy by its id)
    assert len(_entries(replica.url, Keys(settings.key_prefix).stream(0))) == 3


def test_on_a_cluster_the_wait_goes_to_the_streams_own_master() -> None:
    cluster = start_redis_cluster(masters=3, replicas=1)
    try:
        settings = Settings(
            redis_url=cluster.url,
            redis_cluster=True,
            queue_redis_url=cluster.url,
            key_prefix=unique("rep"),
            shards=6,
            publish_replicas=1,
        )
        client = connect(settings)
        keys = Keys(settings.key_prefix)
        try:
            for n in range(12):
                session = f"s{n}"
                publish_turn(client, settings, chaos_turn(session, 0))
                stream = keys.stream(shard_of(session, settings.shards))
                master = _node(cluster, int(client.get_node_from_key(stream).port))  # type: ignore[attr-defined]
                # a WAIT sent to another node would count none of this write's replicas
                assert stream.encode() in _replica_keys(_replica_of(cluster, master)), (session, stream)
        finally:
            client.close()
    finally:
        cluster.stop()


def _replica_keys(replica: RedisServer) -> set[bytes]:
    client = redis.Redis.from_url(replica.url)
    try:
        client.execute_command("READONLY")
        return set(client.keys("*"))
    finally:
        client.close()
