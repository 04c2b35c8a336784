"""A turn stream's part in a live reshard (core.shard_map): a new stream is read only once the
previous generation's streams of its tag are retired; a superseded stream retires once its
tag is closed and it holds nothing unapplied. The shard consumer calls these at the start of
its run and whenever a read of a superseded stream comes back empty."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import redis.asyncio as aioredis

from core.config import Settings
from core.shard_map import StreamShard
from workers.capture.services import CaptureServices
from workers.store.keys import Keys
from workers.store.scripts import RETIRE_STREAM

log = logging.getLogger(__name__)

RETIRED = 1
NOT_YET = 0
LEASE_LOST = -1


class StreamHolder(Protocol):
    """The shard consumer holding a stream's lease (``workers.capture.shard.ShardConsumer``)."""

    worker: CaptureServices
    settings: Settings
    redis: aioredis.Redis
    keys: Keys
    shard: StreamShard
    stream: str
    lease_key: str
    group: str
    consumer: str
    stop_requested: bool
    lost: bool


async def predecessors_retired(holder: StreamHolder) -> bool:
    """Wait until every stream of the previous generation with this stream's tag is retired:
    a session's older entries there apply before any here. False when stopped first."""
    waited = False
    shard = holder.shard
    while predecessors := holder.worker.shard_map.predecessors(shard):
        retired = await holder.redis.smembers(holder.keys.retired(shard.tag, predecessors[0].generation))
        if {p.number for p in predecessors} <= {int(n) for n in retired}:
            break
        if not waited:
            log.info("shard %s: waiting for %s to drain", shard, ", ".join(map(str, predecessors)))
            waited = True
        if holder.stop_requested or holder.lost:
            return False
        await asyncio.sleep(holder.settings.capture_block_ms / 1000)
    if waited:
        log.info("shard %s: its tag's previous streams are retired; reading", shard)
    return True


def superseded(holder: StreamHolder) -> bool:
    """The deployment moved on to a later generation than this stream's."""
    generation: int = holder.worker.shard_map.generation
    return holder.shard.generation < generation


async def retire(holder: StreamHolder) -> int:
    """Retire the stream when its tag is closed and it holds nothing unapplied (fenced by the
    lease): ``RETIRED``, ``NOT_YET`` or ``LEASE_LOST``."""
    shard = holder.shard
    verdict = int(
        await RETIRE_STREAM.run(
            holder.redis,
            [
                holder.lease_key,
                holder.stream,
                holder.keys.tag_generation(shard.tag),
                holder.keys.retired(shard.tag, shard.generation),
            ],
            [holder.consumer, holder.group, shard.generation, shard.number],
        )
    )
    if verdict == RETIRED:
        log.info("shard %s retired: every entry it will hold is applied", shard)
    return verdict
