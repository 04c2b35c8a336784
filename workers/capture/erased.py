"""Capture drops the turns of an erased scope unapplied (core.erasure, workers.erasure).

``ovstream erase`` stands a tombstone (``Keys.erased_scopes``: a digest of the scope -> until
when) before it removes anything; each capture worker reads the tombstones at most every
``REFRESH_S`` (one HGETALL, at the start of a round) and, at the start of each round,
acks and deletes from the stream every entry of a session a tombstone covers, writing nothing
of it anywhere. The erasure pauses longer than ``REFRESH_S`` plus a round before it removes
anything, and passes twice, so a turn a round took before the tombstone is removed with the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from core.config import Settings
from core.erasure import digests_of_session
from workers.capture.fence import ShardFence
from workers.capture.plan import Entry
from workers.store.connection import REDIS_ERRORS, text
from workers.store.keys import Keys

log = logging.getLogger(__name__)

REFRESH_S = 1.0
"""How stale a worker's view of the tombstones may be."""
READ_TIMEOUT_S = 0.5
"""The longest a round waits to read them."""


class Tombstones:
    """The tombstones standing, as this worker last read them: read again, at the start of a
    round, when the view is ``REFRESH_S`` old (so the first turn after an idle spell meets a fresh
    one), each round reading for itself (none goes on while another's read is in flight). A read
    waits ``READ_TIMEOUT_S`` at most and a failed one keeps the view it had: a Redis node failing
    over stalls the shards it does not hold by that much a second at most."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._read_at = float("-inf")

    async def refresh(self, redis: aioredis.Redis, settings: Settings) -> None:
        if time.monotonic() - self._read_at < REFRESH_S:
            return
        first = self._read_at == float("-inf")
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                raw = await redis.hgetall(Keys(settings.key_prefix).erased_scopes())
        except (TimeoutError, *REDIS_ERRORS, OSError) as exc:
            self._read_at = time.monotonic()  # not again before REFRESH_S: the view stands meanwhile
            if first:  # nothing known yet: said, since an erased scope's turn could apply meanwhile
                log.warning("erased scopes not read (%s); read again every %.0f s", exc, REFRESH_S)
            else:
                log.debug("erased scopes not read (%s); the last view stands", exc)
            return
        wall = time.time()
        self._until = {text(k): float(v) for k, v in raw.items() if float(v) > wall}
        self._read_at = time.monotonic()

    def covers(self, settings: Settings, entry: Entry) -> bool:
        if not self._until or entry.session is None:
            return False
        address = entry.session.address
        digests = digests_of_session(settings.key_prefix, address.tenant, address.agent_id, address.ov_session_id)
        return any(d in self._until for d in digests)


async def drop_erased(
    settings: Settings,
    redis: aioredis.Redis,
    fence: ShardFence,
    tombstones: Tombstones,
    groups: list[list[Entry]],
) -> tuple[list[list[Entry]], list[Entry]]:
    """(the groups to apply, the entries of erased sessions: acked and deleted, never applied)."""
    await tombstones.refresh(redis, settings)
    kept: list[list[Entry]] = []
    dropped: list[Entry] = []
    for entries in groups:
        if tombstones.covers(settings, entries[0]):
            dropped += entries
        else:
            kept.append(entries)
    on_stream = [e.id for e in dropped if e.letter is None]
    if on_stream:
        await fence.apply([], on_stream)
        await redis.xdel(fence.stream, *on_stream)
    if dropped:
        log.info("dropped %d turns of erased sessions unapplied (their tombstone stands)", len(dropped))
    return kept, dropped
