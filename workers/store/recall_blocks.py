"""Each user turn's recall block, settled once in Redis for every process and request of the turn.

``Keys.recall_turn`` holds the block ("" for a turn whose search found nothing) for
``recall_turn_ttl_s``; the first search of the turn to finish sets it (SET NX), and every
later request of the turn reads that one (core.turns.recall_turn_key names the turn).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from workers.store.connection import optional_text


async def read_block(redis_client: aioredis.Redis, key: str) -> str | None:
    """The turn's settled block ("" for none), or None when no search settled it yet."""
    return optional_text(await redis_client.get(key))


async def settle_block(redis_client: aioredis.Redis, key: str, block: str, ttl_s: int) -> str | None:
    """Settle ``block`` as the turn's unless one is already; returns the block now settled
    (None only when the settled one expired in between)."""
    if await redis_client.set(key, block, ex=ttl_s, nx=True):
        return block
    return await read_block(redis_client, key)
