"""A capture worker's shard leases: taken with a new epoch, renewed each on its own.

A shard's lease (``Keys.capture_lease``) names the consumer holding it and lives
``lease_ms``; every taking moves the shard's epoch (``Keys.capture_lease_epoch``), which is how
a consumer whose lease lapsed while nobody took it knows it may take it back
(workers.store.lua.HOLDS). Renewals go out one command per shard, concurrently: on a
Redis Cluster a node that is away (a master failing over) delays only the shards whose
leases it holds, not every shard of the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import redis.asyncio as aioredis

from core.shard_map import StreamShard
from workers.capture.services import CaptureStats
from workers.store.connection import redis_went_away, text
from workers.store.keys import Keys
from workers.store.scripts import CAPTURE_LEASE_RENEW, LEASE_ACQUIRE


class LeaseHolder(Protocol):
    """A shard consumer as its lease sees it (``workers.capture.shard.ShardConsumer``)."""

    lease_key: str
    epoch_key: str
    epoch: str
    released: bool
    lost: bool


class ShardLeases:
    """Takes and renews the leases of one capture worker (``consumer``)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, consumer: str, lease_ms: int, stats: CaptureStats) -> None:
        self.redis, self.keys, self.consumer, self.lease_ms, self.stats = redis, keys, consumer, lease_ms, stats
        self._last_renewal: float | None = None

    async def take(self, shard: StreamShard) -> str | None:
        """Take ``shard``'s lease when it is free (or ours): its new epoch; None when another
        consumer holds it."""
        taken, epoch = await LEASE_ACQUIRE.run(
            self.redis,
            [self.keys.capture_lease(shard), self.keys.capture_lease_epoch(shard)],
            [self.consumer, self.lease_ms, ""],
        )
        return text(epoch) if int(taken) == 1 else None

    async def renew(self, holders: Sequence[LeaseHolder]) -> None:
        """Renew the leases of ``holders`` (those not released); one whose lease another
        consumer took is marked ``lost``. A holder whose Redis node is away is left alone: it
        meets that itself, and is renewed at the next call."""
        holding = [h for h in holders if not h.released]

        async def renew(holder: LeaseHolder) -> Any:
            keys = [holder.lease_key, holder.epoch_key]
            return await CAPTURE_LEASE_RENEW.run(self.redis, keys, [self.consumer, holder.epoch, self.lease_ms])

        replies = await asyncio.gather(*(renew(h) for h in holding), return_exceptions=True)
        for holder, renewed in zip(holding, replies):
            if isinstance(renewed, BaseException):
                if not redis_went_away(renewed):
                    raise renewed
                continue
            if not int(renewed) and not holder.released:
                holder.lost = True
        now = asyncio.get_running_loop().time()
        if not holding:
            self._last_renewal = None
        elif not any(isinstance(r, BaseException) for r in replies):
            if self._last_renewal is not None:  # the longest gap while shards were held (the bench prints it)
                self.stats.longest_renewal_gap_s = max(self.stats.longest_renewal_gap_s, now - self._last_renewal)
            self._last_renewal = now
