"""The shard consumers of a capture worker (workers.capture.worker), over their lives: each
started on a lease won, reaped when it ends, retaken after a crash with a backoff, and all
stopped (within ``STOP_GRACE_S``, whatever Redis and OV do) when the worker stops.

A mixin of ``CaptureWorker``: the state it reads and writes is the worker's, declared here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

import redis.asyncio as aioredis

from core import defaults
from core.config import Settings
from core.shard_map import StreamShard
from workers.capture.services import CaptureServices, CaptureStats
from workers.capture.shard import ShardConsumer
from workers.store.connection import REDIS_ERRORS
from workers.store.health import forget_health
from workers.store.keys import Keys
from workers.store.usage import flush_async

log = logging.getLogger("workers.capture.worker")  # the worker's lines, as before the split


class WorkerKilled(BaseException):
    """Raised by a fault hook: the worker stops at once, like a killed process."""


class ConsumerSupervision:
    """Starting, reaping, restarting and stopping shard consumers, for ``CaptureWorker``."""

    settings: Settings
    redis: aioredis.Redis
    keys: Keys
    consumer: str
    stats: CaptureStats
    consumers: dict[StreamShard, ShardConsumer]
    crashes: dict[StreamShard, int]
    restart_at: dict[StreamShard, float]
    retired: set[StreamShard]
    stopping: bool
    burst: bool
    clock: Callable[[], float]
    _burst_done: set[StreamShard]
    _wake: asyncio.Event

    async def close(self) -> None:
        raise NotImplementedError

    def restart_delay(self, crashes: int) -> float:
        """Backoff before the ``crashes``-th crash in a row of a shard consumer is retaken."""
        delay: float = defaults.CAPTURE_RESTART_BACKOFF_S * 2.0 ** (max(1, crashes) - 1)
        return min(defaults.CAPTURE_RESTART_BACKOFF_MAX_S, delay)

    def _crashed(self, shard: StreamShard, consumer: ShardConsumer, exc: BaseException) -> None:
        # a consumer that ran longer than the longest backoff before crashing starts the count afresh
        if self.clock() - consumer.started_at > defaults.CAPTURE_RESTART_BACKOFF_MAX_S:
            self.crashes.pop(shard, None)
        crashes = self.crashes[shard] = self.crashes.get(shard, 0) + 1
        delay = self.restart_delay(crashes)
        self.restart_at[shard] = self.clock() + delay
        trace = crashes == 1 or log.isEnabledFor(logging.DEBUG)
        log.error(
            "shard %s consumer crashed (%d in a row): %s: %s; retaking it in %.1fs",
            shard,
            crashes,
            type(exc).__name__,
            exc,
            delay,
            exc_info=exc if trace else None,
        )

    def _start(self, shard: StreamShard, epoch: str) -> None:
        consumer = ShardConsumer(cast(CaptureServices, self), shard, epoch)  # the worker serves them
        if self.stopping:
            # stop() came while the tick awaited this shard's lease: born stopping, the consumer
            # gives the lease straight back (else it would run on, and the worker with it)
            consumer.request_stop()
        consumer.started_at = self.clock()
        consumer.task = asyncio.create_task(consumer.run(), name=f"capture-shard-{shard}")
        consumer.task.add_done_callback(lambda _: self._wake.set())
        self.consumers[shard] = consumer
        log.info("shard %s acquired by %s", shard, self.consumer)

    def _reap(self) -> None:
        for shard, consumer in list(self.consumers.items()):
            task = consumer.task
            if task is None or not task.done():
                continue
            del self.consumers[shard]
            if task.cancelled():
                continue
            exc = task.exception()
            if isinstance(exc, WorkerKilled):
                raise exc
            if exc is not None:
                self._crashed(shard, consumer, exc)
                continue
            self.crashes.pop(shard, None)
            if consumer.retired:
                self.retired.add(shard)
            if self.burst and consumer.released:
                self._burst_done.add(shard)

    async def _shutdown(self, *, unregister: bool) -> None:
        self.stopping = True
        for consumer in self.consumers.values():
            consumer.request_stop()
        tasks = [c.task for c in self.consumers.values() if c.task is not None]
        if tasks:  # rounds in progress finish and release their shards, within the grace
            _, late = await asyncio.wait(tasks, timeout=defaults.STOP_GRACE_S)
            for task in late:  # Redis or OV away: what they hold is read again by the next owner
                task.cancel()
            if late:
                log.warning(
                    "%d shard(s) not released within %.0fs of the stop (their leases lapse)",
                    len(late),
                    defaults.STOP_GRACE_S,
                )
                await asyncio.wait(late, timeout=1.0)
        self.consumers.clear()
        if unregister:
            try:
                async with asyncio.timeout(defaults.STOP_GRACE_S):
                    await self._unregister()
            except (*REDIS_ERRORS, TimeoutError) as exc:
                log.warning("could not unregister %s (it expires): %s", self.consumer, exc or "Redis did not answer")
        await self.close()
        log.info("capture worker %s stopped: %s", self.consumer, self.stats)

    async def _unregister(self) -> None:
        await flush_async(self.redis, self.settings)  # the usage of its last rounds
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(self.keys.capture_workers(), self.consumer)
            forget_health(pipe, self.settings, self.consumer)
            await pipe.execute()
