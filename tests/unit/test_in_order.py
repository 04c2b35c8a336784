"""``InOrder`` (workers.store.in_order): one pipeline on one Redis, each command as it is given
on a cluster client (whose pipeline could run a later command first on another node)."""

from __future__ import annotations

from typing import Any

import fakeredis

from workers.store.in_order import InOrder


class _ClusterLike:
    """A client that is no ``redis.Redis`` (as redis-py's cluster client is not), over fakeredis."""

    def __init__(self, redis: fakeredis.FakeRedis) -> None:
        self._redis = redis

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)


def test_on_one_redis_nothing_is_sent_until_run_and_then_in_one_pipeline() -> None:
    redis = fakeredis.FakeRedis()
    steps = InOrder(redis).add(lambda client: client.set("a", 1)).add(lambda client: client.incr("a"))
    assert redis.get("a") is None  # queued
    assert steps.run() == [True, 2]
    assert redis.get("a") == b"2"


def test_on_a_cluster_client_each_command_runs_as_it_is_added_answers_in_order() -> None:
    redis = fakeredis.FakeRedis()
    steps = InOrder(_ClusterLike(redis)).add(lambda client: client.set("a", 1))  # type: ignore[arg-type]
    assert redis.get("a") == b"1"  # ran at once: the next cannot overtake it
    steps.add(lambda client: client.incr("a"))
    assert steps.run() == [True, 2]
    assert steps.run() == []  # answered once
