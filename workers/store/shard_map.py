"""The deployment's shard map in Redis (core.shard_map): read it, reshard, close, retire, finish.

The map lives in the deployment hash (``Keys.deployment``): ``shards`` (the record tags: the
count the deployment was created with), ``generation``, ``streams`` (the current generation's
count) and ``previous`` (``"<generation>.<streams>"`` while that generation drains). A reshard
(``ovstream reshard --shards N``) writes the new map, then *closes* each tag
(``CLOSE_TAG``): from then on publishers put the tag's sessions on the new streams. Capture
drains the old streams, *retires* each one (``RETIRE_STREAM``), starts reading a new stream
once its tag's old streams are retired, and forgets the previous generation when all are
(``finish_drain``). Every step is idempotent: a crash anywhere is finished by the next caller
(the reshard command run again, or any capture worker's tick).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import redis
import redis.asyncio as aioredis

from core.config import Settings
from core.shard_map import ShardMap, StreamShard, resharded
from workers.store.connection import text
from workers.store.deployment import SHARDS_FIELD
from workers.store.keys import Keys
from workers.store.scripts import CLOSE_TAG, DELETE_DRAINED, FINISH_DRAIN

log = logging.getLogger(__name__)

GENERATION_FIELD = "generation"
STREAMS_FIELD = "streams"
PREVIOUS_FIELD = "previous"


def map_of(settings: Settings, fields: Mapping[Any, Any]) -> ShardMap:
    """The map a deployment hash (HGETALL) describes; a deployment never resharded (or not yet
    recorded) runs generation 0 with ``settings.shards`` streams."""
    h = {text(k): text(v) for k, v in fields.items()}
    tags = int(h.get(SHARDS_FIELD) or settings.shards)
    previous = None
    if h.get(PREVIOUS_FIELD):
        generation, _, count = h[PREVIOUS_FIELD].partition(".")
        previous = (int(generation), int(count))
    return ShardMap(tags, int(h.get(GENERATION_FIELD) or 0), int(h.get(STREAMS_FIELD) or tags), previous)


def previous_field(shard_map: ShardMap) -> str:
    generation, count = shard_map.previous or (0, 0)
    return f"{generation}.{count}"


def read_shard_map(client: redis.Redis, settings: Settings) -> ShardMap:
    return map_of(settings, client.hgetall(Keys(settings.key_prefix).deployment()))


async def read_shard_map_async(client: aioredis.Redis, settings: Settings) -> ShardMap:
    return map_of(settings, await client.hgetall(Keys(settings.key_prefix).deployment()))


def reshard(client: redis.Redis, settings: Settings, shards: int) -> ShardMap:
    """Move the deployment to ``shards`` streams (``core.shard_map.ReshardRefused`` when it
    cannot) and close every tag; returns the new map. Run again after a crash it refuses
    (a generation is draining), and any capture worker finishes the closing."""
    keys = Keys(settings.key_prefix)
    key = keys.deployment()
    client.hsetnx(key, SHARDS_FIELD, settings.shards)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                new = resharded(map_of(settings, pipe.hgetall(key)), shards)
                pipe.multi()
                pipe.hset(
                    key,
                    mapping={
                        GENERATION_FIELD: new.generation,
                        STREAMS_FIELD: new.shards,
                        PREVIOUS_FIELD: previous_field(new),
                    },
                )
                pipe.execute()
                break
            except redis.WatchError:
                continue
    log.info("reshard: generation %d, %d shards (from %s)", new.generation, new.shards, previous_field(new))
    for tag in range(new.tags):
        CLOSE_TAG(client, *close_call(keys, settings, new, tag))
    return new


def close_call(keys: Keys, settings: Settings, shard_map: ShardMap, tag: int) -> tuple[list[str], list[str | int]]:
    """``CLOSE_TAG``'s keys and arguments for one tag of a map with a previous generation."""
    olds = [keys.stream(s) for s in shard_map.draining() if s.tag == tag]
    news = [keys.stream(s) for s in shard_map.current() if s.tag == tag]
    return [keys.tag_generation(tag), *olds, *news], [shard_map.generation, len(olds), settings.consumer_group]


async def close_tags(client: aioredis.Redis, settings: Settings, shard_map: ShardMap, tags: Iterable[int]) -> None:
    """Close ``tags`` of a map with a previous generation (what a reshard that died left)."""
    keys = Keys(settings.key_prefix)
    for tag in tags:
        if await CLOSE_TAG.run(client, *close_call(keys, settings, shard_map, tag)):
            log.info("tag %d closed: its sessions publish to generation %d", tag, shard_map.generation)


async def finish_drain(client: aioredis.Redis, settings: Settings, shard_map: ShardMap) -> bool:
    """Forget the previous generation once every stream of it retired, then delete its
    streams and retired sets (in that order: a crash between the two leaves only keys nothing
    reads). A stream holding what an older publisher appended after it retired is kept for
    capture to adopt (workers.store.strays). True when this call did it."""
    keys = Keys(settings.key_prefix)
    done = await FINISH_DRAIN.run(client, [keys.deployment()], [shard_map.generation, previous_field(shard_map)])
    if not int(done):
        return False
    old = shard_map.draining()
    deleted = 0
    for stream in old:
        deleted += int(await DELETE_DRAINED.run(client, [keys.stream(stream)], [settings.consumer_group]))
    for tag in {s.tag for s in old}:
        await client.delete(keys.retired(tag, old[0].generation))
    log.info("generation %d retired: %d of its %d streams deleted", old[0].generation, deleted, len(old))
    return True


def retired_of(shard_map: ShardMap, replies: list[set[bytes]]) -> set[StreamShard]:
    """The previous generation's retired streams, from one SMEMBERS reply per tag (in tag order)."""
    numbers = {int(n) for members in replies for n in members}
    return {s for s in shard_map.draining() if s.number in numbers}


async def follow_map(
    client: aioredis.Redis, settings: Settings, deployment: Mapping[Any, Any]
) -> tuple[ShardMap, set[StreamShard]]:
    """The map a deployment hash describes and its draining generation's retired streams. On
    the way (what every capture tick does): a tag a reshard left open is closed, and once
    every old stream retired the old generation is forgotten (the map returned has none)."""
    shard_map = map_of(settings, deployment)
    if shard_map.previous is None:
        return shard_map, set()
    keys = Keys(settings.key_prefix)
    async with client.pipeline(transaction=False) as pipe:
        for tag in range(shard_map.tags):
            pipe.get(keys.tag_generation(tag))
        for tag in range(shard_map.tags):
            pipe.smembers(keys.retired(tag, shard_map.previous[0]))
        replies = await pipe.execute()
    open_tags = [t for t, g in enumerate(replies[: shard_map.tags]) if int(g or 0) < shard_map.generation]
    if open_tags:
        await close_tags(client, settings, shard_map, open_tags)
    retired = retired_of(shard_map, replies[shard_map.tags :])
    if len(retired) == len(shard_map.draining()) and await finish_drain(client, settings, shard_map):
        return ShardMap(shard_map.tags, shard_map.generation, shard_map.shards), set()
    return shard_map, retired
