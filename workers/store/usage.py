"""Usage per tenant in Redis (core.usage): counted in a process's tally where the work happens,
added to the hour's and the day's bucket (``Keys.usage``) by the process's own periodic loop
(capture's beat, the RPC's sampler, a worker's due-job thread), read back for ``GET
/v1/usage``, ``ovstream usage``, the console and ``/metrics``.

A tally is flushed every ``USAGE_FLUSH_S`` or so, in one pipeline: assemble, which answers in
about a millisecond, never waits on a count. A process killed between flushes loses its last
seconds of counts, never a turn: a count comes short, it is not made up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import redis as redis_lib
import redis.asyncio as aioredis

from core.config import Settings
from core.session import tenant_for_api_key
from core.usage import PERIODS, Usage, bucket, buckets_back, field, parse_field
from workers.store.connection import REDIS_ERRORS, text
from workers.store.keys import Keys

log = logging.getLogger(__name__)

USAGE_FLUSH_S = 5.0
"""How often a commit worker adds its tally to Redis (at most this much is lost with a killed
one; a stopped one flushes). Usage is read by the hour and the day, and each flush costs a
command per tenant and count, so not more often (2 s: 7 of a commit's Redis commands in
bench/commit_scaleout.py)."""


class UsageTally:
    """One process's counts since its last flush, per (tenant, count); any thread may add."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str | None, str]] = Counter()

    def add(self, tenant: str | None, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[(tenant, name)] += n

    def take(self) -> Counter[tuple[str | None, str]]:
        """What was added since the last ``take`` (and forget it)."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
        return counts

    def put_back(self, counts: Mapping[tuple[str | None, str], int]) -> None:
        """A flush that failed (Redis away): its counts wait for the next one."""
        with self._lock:
            self._counts.update(counts)


TALLY = UsageTally()
"""This process's tally: every counting place adds to it, its periodic loop flushes it."""


def count_ov_request(settings: Settings) -> Any:
    """The OV client's request hook (core.ov.client): one OV request of the key's tenant
    (``core.session.tenant_for_api_key``, as the RPC scopes a caller)."""
    return lambda api_key: TALLY.add(tenant_for_api_key(settings, api_key), "ov_requests")


def _commands(pipe: Any, settings: Settings, counts: Mapping[tuple[str | None, str], int], now: float) -> None:
    keys = Keys(settings.key_prefix)
    keep = {"hour": settings.usage_keep_hours * 3600, "day": settings.usage_keep_days * 86400}
    for period in PERIODS:
        key = keys.usage(period, bucket(period, now))
        for (tenant, name), n in counts.items():
            pipe.hincrby(key, field(tenant, name), n)
        pipe.expire(key, keep[period] + PERIODS[period])  # the bucket's own length, then the keep


def flush(redis: redis_lib.Redis, settings: Settings, tally: UsageTally = TALLY) -> int:
    """Add ``tally`` to the buckets of now; how many counts went. With Redis away (or the
    node of a bucket's slot failing over) they wait in the tally for the next flush: a count
    never holds up the loop that flushes it (capture's tick, the mover's sweep)."""
    counts = tally.take()
    if not counts:
        return 0
    try:
        with redis.pipeline(transaction=False) as pipe:
            _commands(pipe, settings, counts, time.time())
            pipe.execute()
    except REDIS_ERRORS as exc:
        tally.put_back(counts)
        log.debug("usage not added yet (Redis: %s)", exc)
        return 0
    return len(counts)


async def flush_async(redis: aioredis.Redis, settings: Settings, tally: UsageTally = TALLY) -> int:
    """``flush`` for an asyncio process."""
    counts = tally.take()
    if not counts:
        return 0
    try:
        async with redis.pipeline(transaction=False) as pipe:
            _commands(pipe, settings, counts, time.time())
            await pipe.execute()
    except REDIS_ERRORS as exc:
        tally.put_back(counts)
        log.debug("usage not added yet (Redis: %s)", exc)
        return 0
    return len(counts)


def _decode(raw: Mapping[Any, Any], tenants: set[str] | None) -> Usage:
    usage: Usage = {}
    for f, n in raw.items():
        parsed = parse_field(text(f))
        if parsed is None or (tenants is not None and parsed[0] not in tenants):
            continue
        usage.setdefault(parsed[0], {})[parsed[1]] = int(n)
    return usage


def read_usage(
    redis: redis_lib.Redis, settings: Settings, period: str, count: int, *, tenants: set[str] | None = None
) -> dict[str, Usage]:
    """The last ``count`` buckets of ``period`` (oldest first), each tenant -> count -> value;
    only ``tenants`` when given."""
    names = buckets_back(period, time.time(), count)
    keys = Keys(settings.key_prefix)
    with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(keys.usage(period, name))
        raws = pipe.execute()
    return {name: _decode(raw, tenants) for name, raw in zip(names, raws)}
