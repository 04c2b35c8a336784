"""Turns a publisher older than live resharding appends to a retired stream (workers.store.strays):
it writes to its session tag's first-generation stream whatever the map says; capture moves each
such turn to the session's current stream, once, in order, and nothing is lost."""

from __future__ import annotations

from typing import Any

from core.config import Settings
from core.events import STREAM_FIELD, encode
from core.shard_map import ShardMap
from tests.capture.test_reshard import _in_order, commit_turn
from tests.helpers.capture import expected_texts, make_worker, ov_texts, run_until
from workers.store.connection import connect_async
from workers.store.deployment import check_deployment
from workers.store.keys import Keys
from workers.store.scripts import DELETE_DRAINED
from workers.store.shard_map import read_shard_map, reshard
from workers.store.strays import adopt_strays
from workers.store.streams import publish_raw


def _first_generation(settings: Settings) -> ShardMap:
    return ShardMap(settings.shards, 0, settings.shards)


def _old_publisher(redis_client: Any, settings: Settings, sessions: list[str], index: int) -> None:
    """Turn ``index`` of each session as a plugin older than resharding publishes it: XADD to
    the stream of the session's tag in generation 0, whatever the map says."""
    keys = Keys(settings.key_prefix)
    for s in sessions:
        publish_raw(redis_client, keys.stream(_first_generation(settings).stream_of(s)), encode(commit_turn(s, index)))


async def test_an_older_publishers_turns_after_a_reshard_reach_ov_once_and_in_order(redis_client, settings, fake_ov):
    check_deployment(redis_client, settings)
    sessions = [f"old-{i}" for i in range(12)]
    keys = Keys(settings.key_prefix)
    _old_publisher(redis_client, settings, sessions, 0)
    reshard(redis_client, settings, 8)
    _old_publisher(redis_client, settings, sessions, 1)  # generation 0 drains: still read there

    def drained_and_applied() -> bool:
        return read_shard_map(redis_client, settings).previous is None and _in_order(fake_ov, sessions, 2)

    workers = [make_worker(settings, fake_ov, consumer=f"w{i}") for i in range(2)]
    await run_until(workers, drained_and_applied, timeout_s=60)
    # Generation 0 is forgotten and its streams deleted; the old plugin creates them again.
    _old_publisher(redis_client, settings, sessions, 2)
    _old_publisher(redis_client, settings, sessions, 3)
    assert sum(redis_client.xlen(keys.stream(t)) for t in range(settings.shards)) == 2 * len(sessions)
    workers = [make_worker(settings, fake_ov, consumer=f"v{i}") for i in range(2)]
    await run_until(workers, lambda: _in_order(fake_ov, sessions, 4), timeout_s=60)
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, 4), s
    assert not any(redis_client.exists(keys.stream(t)) for t in range(settings.shards))


async def test_only_what_the_group_never_delivered_is_adopted(redis_client, settings):
    check_deployment(redis_client, settings)
    keys = Keys(settings.key_prefix)
    sessions = [f"kept-{i}" for i in range(8)]
    first = _first_generation(settings)
    stream = keys.stream(first.stream_of(sessions[0]))
    group = settings.consumer_group
    publish_raw(redis_client, stream, encode(commit_turn(sessions[0], 0)))
    redis_client.xgroup_create(stream, group, id="0")
    for _, entries in redis_client.xreadgroup(group, "c", {stream: ">"}):  # applied before the reshard
        redis_client.xack(stream, group, *(entry_id for entry_id, _ in entries))
    new = reshard(redis_client, settings, 8)
    redis_client.hdel(keys.deployment(), "previous")  # generation 0 forgotten, this stream not deleted
    publish_raw(redis_client, stream, encode(commit_turn(sessions[0], 1)))  # a stray
    client = connect_async(settings)
    try:
        assert await adopt_strays(client, settings, read_shard_map(redis_client, settings)) == 1
        assert await adopt_strays(client, settings, read_shard_map(redis_client, settings)) == 0
    finally:
        await client.aclose()
    moved = redis_client.xrange(keys.stream(new.stream_of(sessions[0])))
    assert [fields[STREAM_FIELD.encode()].count(b'"kept-0-1"') for _, fields in moved] == [1]
    assert not redis_client.exists(stream)  # nothing left to adopt: deleted


def test_a_retired_stream_is_deleted_only_once_nothing_is_left_undelivered(redis_client, settings):
    stream = f"{settings.key_prefix}:{{s0}}:turns:probe"
    group = settings.consumer_group
    redis_client.xgroup_create(stream, group, id="0", mkstream=True)
    redis_client.xadd(stream, {"e": "1"})
    redis_client.xreadgroup(group, "c", {stream: ">"})
    redis_client.xadd(stream, {"e": "2"})  # never delivered
    assert DELETE_DRAINED(redis_client, [stream], [group]) == 0
    redis_client.xreadgroup(group, "c", {stream: ">"})
    assert DELETE_DRAINED(redis_client, [stream], [group]) == 0  # delivered, not acknowledged
    assert redis_client.exists(stream)
    for entry_id, _ in redis_client.xrange(stream):
        redis_client.xack(stream, group, entry_id)
    assert DELETE_DRAINED(redis_client, [stream], [group]) == 1
    assert not redis_client.exists(stream)
    redis_client.xadd(stream, {"e": "3"})  # no group at all: all of it is undelivered
    assert DELETE_DRAINED(redis_client, [stream], [group]) == 0
