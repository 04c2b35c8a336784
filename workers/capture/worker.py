"""The capture worker (``ovstream capture``): turn streams -> OV sessions.

Each shard stream is consumed by one worker at a time. A worker owns a
shard through a renewable lease (``Keys.capture_lease``, a lease of workers.store.scripts, renewed
every third of its length, or sooner); live workers announce themselves in
``Keys.capture_workers()`` and split the shards (core.shard_split), so 4 workers x 4 shards
spread out and a dead worker's shards are taken over once its lease expires.
The shard's consumer (workers.capture.shard) does the reading, ordering,
exactly-once application and dead-lettering. A consumer that crashes is
started again only after a backoff (``CAPTURE_RESTART_BACKOFF_S``, doubling
per crash in a row up to ``CAPTURE_RESTART_BACKOFF_MAX_S``), logging one line
per crash and the traceback only for the first.

``fault_hook(step)`` is called at the steps of a round (workers.capture.round: "before_write",
"after_write", "before_ack", "after_ack", "before_snapshot", "before_snapshot_store");
raising ``WorkerKilled`` from it stops the worker on the spot, cleaning nothing up (leases,
pending entries and intents stay as a crash leaves them) — the tests' kill switch; raising
another error stands for that step failing (Redis away, OV refusing a read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import redis as redis_lib
import redis.asyncio as aioredis
from cachetools import LRUCache

from core import defaults
from core.config import Settings
from core.events import CommitReason, ContextSnapshot
from core.ov.client import OVClient
from core.redaction import SessionPlaceholders
from core.shard_map import ShardMap, StreamShard
from core.shard_split import fair_share, preference
from workers.capture.erased import Tombstones
from workers.capture.leases import ShardLeases
from workers.capture.ov_watch import OvOutage, OvWatch, Pausable
from workers.capture.plan import SessionRef
from workers.capture.services import CaptureStats
from workers.capture.settle import RecordedStates
from workers.capture.shard import ShardConsumer
from workers.capture.supervision import ConsumerSupervision, WorkerKilled
from workers.commits.api import request_commit
from workers.store.connection import (
    REDIS_AWAY,
    await_redis,
    connect,
    connect_async,
    redis_went_away,
)
from workers.store.deployment import check_deployment_async
from workers.store.health import record_health
from workers.store.keys import Keys
from workers.store.shard_map import follow_map
from workers.store.strays import adopt_strays
from workers.store.usage import count_ov_request, flush_async

SCOPED_CLIENTS = 4096
"""(tenant, agent) pairs whose OV client one capture process keeps (~1 KB each)."""

log = logging.getLogger(__name__)


def redis_connections(settings: Settings) -> int:
    """Connections the worker's asyncio Redis client keeps at most: a few per stream it may hold
    (twice the shards: a reshard drains the old generation beside the new), one per OV call in
    flight (a step that touches Redis per session stays under the OV slots), and a few for the tick."""
    return defaults.REDIS_POOL_PER_SHARD * 2 * settings.shards + settings.capture_ov_concurrency + 8


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class CaptureWorker(ConsumerSupervision):
    """Consumes its share of the turn streams until ``stop()`` (or, with ``burst``, until caught up)."""

    def __init__(
        self,
        settings: Settings,
        *,
        redis: aioredis.Redis | None = None,
        sync_redis: redis_lib.Redis | None = None,
        ov: OVClient | None = None,
        ov_transport: httpx.AsyncBaseTransport | None = None,
        consumer: str | None = None,
        shards: Sequence[int] | None = None,
        burst: bool = False,
        fault_hook: Callable[[str], None] | None = None,
        lease_ms: int | None = None,
        on_snapshot: Callable[[ContextSnapshot], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._owns_redis = redis is None
        if redis is None:
            redis = connect_async(
                settings, block_ms=settings.capture_block_ms, max_connections=redis_connections(settings)
            )
        self.redis = redis
        self._owns_sync_redis = sync_redis is None
        self.sync_redis = sync_redis if sync_redis is not None else connect(settings)  # request_commit's threads
        self._owns_ov = ov is None
        self.ov = (
            ov
            if ov is not None
            else OVClient.from_settings(settings, transport=ov_transport, on_request=count_ov_request(settings))
        )
        self.consumer = consumer or default_consumer_name()
        if shards is not None and (not shards or any(s < 0 for s in shards)):
            raise ValueError(f"shards must be shard numbers (0 and up): {list(shards)}")
        self.only = frozenset(shards) if shards is not None else None
        """The shard numbers this worker may take (``--shards``, any generation); None: all."""
        self.shard_map = ShardMap(settings.shards)
        """The deployment's streams (core.shard_map), read again on every tick."""
        self.recorded = RecordedStates()
        self.numbering = SessionPlaceholders()
        self.tombstones = Tombstones()
        """What this process last recorded of each session (workers.capture.settle)."""
        self.retired: set[StreamShard] = set()
        """Streams of the draining generation that are retired (read on every tick while one drains)."""
        self.burst = burst
        self.fault_hook = fault_hook
        self.lease_ms: int = lease_ms if lease_ms is not None else settings.capture_lease_ms
        self.clock: Callable[[], float] = clock
        """Judges the restart backoff of crashed shard consumers (tests pass a fake one)."""
        self.on_snapshot = on_snapshot
        self.keys = Keys(settings.key_prefix)
        self.stats = CaptureStats()
        self.consumers: dict[StreamShard, ShardConsumer] = {}
        self.stopping = False
        self._wake = asyncio.Event()
        self.ov_outage = OvOutage()
        self.ov_watch = OvWatch(
            self.ov.reachability,
            settings.base_url,
            f"capture worker {self.consumer}",
            urgent=lambda: self.ov_outage.paused(self.consumers.values(), asyncio.get_running_loop().time()),
            on_back=self.ov_back,
        )
        self.ov_slots = asyncio.Semaphore(settings.capture_ov_concurrency)
        self._burst_done: set[StreamShard] = set()
        self.crashes: dict[StreamShard, int] = {}
        """Shard -> crashes of its consumer in a row."""
        self.restart_at: dict[StreamShard, float] = {}
        """Shard -> ``clock()`` time before which its crashed consumer is not started again."""
        self._scoped: LRUCache[tuple[str | None, str], OVClient] = LRUCache(SCOPED_CLIENTS)
        """(tenant, agent) -> its OV client (a view of the one pool, ~1 KB): the recent ones."""
        self.leases = ShardLeases(self.redis, self.keys, self.consumer, self.lease_ms, self.stats)
        self._redis_away_since: float | None = None

    @property
    def shards(self) -> list[StreamShard]:
        """The streams to consume now: the draining generation's not yet retired (first: the
        new ones of their tags wait for them), then the current generation's."""
        draining = [s for s in self.shard_map.draining() if s not in self.retired]
        return [s for s in [*draining, *self.shard_map.current()] if self.only is None or s.number in self.only]

    # --- hooks the shard consumers use -------------------------------------------------------

    def fault(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    def ov_for(self, session: SessionRef) -> OVClient:
        """The OV client acting as the session's agent for its tenant (one pool for all)."""
        key = (session.tenant, session.agent_id)
        client = self._scoped.get(key)
        if client is None:
            api_key = self.settings.user_api_keys.get(session.tenant) if session.tenant else None
            client = self._scoped[key] = self.ov.scoped(peer=session.agent_id, api_key=api_key)
        return client

    async def ensure_group(self, shard: int | StreamShard) -> None:
        try:
            await self.redis.xgroup_create(self.keys.stream(shard), self.settings.consumer_group, id="0", mkstream=True)
        except redis_lib.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def request_commit(self, session: SessionRef, reason: CommitReason = "threshold") -> None:
        """A threshold commit keeps the recent messages; a session-end commit archives all."""
        keep = self.settings.commit_keep_recent_count if reason == "threshold" else 0
        await asyncio.to_thread(
            request_commit, self.sync_redis, self.settings, session.address, reason=reason, keep_recent_count=keep
        )
        self.stats.commits_requested += 1

    def ov_pause_s(self, shard: Pausable, backoff_s: float) -> float:
        return self.ov_outage.pause_s(shard, backoff_s)

    def ov_back(self) -> int:
        return self.ov_outage.back(self.consumers.values())

    async def redis_unavailable(self, exc: BaseException, who: str) -> None:
        """Redis is away or full (``redis_went_away``): one warning per outage, the rest at
        debug level, whichever of the worker's loops met it first. A reply that timed out while
        Redis answers a PING at once is no outage: this process was paused or starved (SIGSTOP,
        a busy machine) past the socket's timeout; said as such."""
        if isinstance(exc, redis_lib.TimeoutError) and self._redis_away_since is None:
            try:
                async with asyncio.timeout(defaults.REDIS_CONFIRM_S):
                    await self.redis.ping()
            except Exception:  # any failure: Redis is away after all
                pass
            else:
                log.info(
                    "%s: a Redis reply timed out (%s) but Redis answers: this process was paused or starved", who, exc
                )
                return
        if self._redis_away_since is None:
            self._redis_away_since = time.monotonic()
            log.warning("%s: Redis unavailable (%s); waiting for it, held entries resume then", who, exc)
        else:
            log.debug("%s: Redis still unavailable (%s)", who, exc)

    def _redis_back(self) -> None:
        if self._redis_away_since is not None:
            away = time.monotonic() - self._redis_away_since
            self._redis_away_since = None
            log.info("capture worker %s: Redis answers again (after %.1fs)", self.consumer, away)

    def snapshot_refreshed(self, snapshot: ContextSnapshot) -> None:
        self.stats.snapshots += 1
        if self.on_snapshot is not None:
            self.on_snapshot(snapshot)

    # --- running ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the rounds in progress, release the shards and return from ``run``."""
        self.stopping = True
        for consumer in self.consumers.values():
            consumer.request_stop()
        self._wake.set()

    async def run(self) -> None:
        killed = False
        started = False  # a worker refused at start (RedisConfigError) never registered
        watch: asyncio.Task[None] | None = None
        try:
            if not await self._start_on_redis():
                return
            started = True
            log.info(
                "capture worker %s on shards %s (group %s)",
                self.consumer,
                ",".join(map(str, self.shards)),
                self.settings.consumer_group,
            )
            if not self.burst:  # a burst ends with its backlog: its rounds say what OV did
                watch = asyncio.create_task(self.ov_watch.run(), name=f"ov-watch {self.consumer}")
            first = True
            while True:
                try:
                    await self._tick(acquire=not self.stopping)
                    self._redis_back()
                except Exception as exc:
                    if not redis_went_away(exc):
                        raise
                    # Redis away: nothing can be read or acked; the leases lapse and are taken again
                    await self.redis_unavailable(exc, f"capture worker {self.consumer}")
                    if self.stopping:  # nothing left to release: the next owner reads it all again
                        break
                if first and self.burst:  # a burst covers the shards it could take at the start
                    self._burst_done.update(s for s in self.shards if s not in self.consumers)
                first = False
                if not self.consumers and (self.stopping or (self.burst and not self.restart_at)):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._wait_s()):
                        await self._wake.wait()
                self._wake.clear()
        except WorkerKilled:
            killed = True  # like a dead process: no acks, no lease releases, no unregistering
            tasks = [c.task for c in self.consumers.values() if c.task is not None]
            for task in tasks:
                task.cancel()
            if tasks:  # let them unwind (bounded: the embedded Redis answers cancellation late)
                await asyncio.wait(tasks, timeout=1.0)
            raise
        finally:
            if watch is not None:  # bounded: a task that ran on after its cancel never holds the stop
                watch.cancel()
                await asyncio.wait([watch], timeout=1.0)
            if not killed:
                await self._shutdown(unregister=started)

    def _facts(self) -> dict[str, str]:
        """What this worker's health record says besides that it is alive (workers.store.health)."""
        now = asyncio.get_running_loop().time()
        shard_saw_it = any(c.ov_down_until > now for c in self.consumers.values())
        ov = "unreachable" if shard_saw_it and self.ov_watch.state == "ok" else self.ov_watch.state
        return {"shards": ",".join(str(s) for s in sorted(self.consumers)), "ov": ov}

    async def _start_on_redis(self) -> bool:
        """Wait for Redis (start order does not matter), then make the consumer groups;
        False when asked to stop first."""
        who = f"capture worker {self.consumer}"
        while await await_redis(self.redis, self.settings, who, lambda: self.stopping):
            try:
                await check_deployment_async(self.redis, self.settings)  # DeploymentMismatch: exit 2
                await self._follow_map(await self.redis.hgetall(self.keys.deployment()))
                for shard in self.shard_map.current():
                    await self.ensure_group(shard)
                return True
            except REDIS_AWAY as exc:  # lost again right after the PING, or full: wait again
                await self.redis_unavailable(exc, who)
                await asyncio.sleep(defaults.REDIS_WAIT_S)
        return False

    async def _tick(self, *, acquire: bool) -> None:
        await self.leases.renew(list(self.consumers.values()))
        await flush_async(self.redis, self.settings)  # the usage its rounds counted (workers.store.usage)
        now_ms = int(time.time() * 1000)
        workers_key = self.keys.capture_workers()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(workers_key, {self.consumer: now_ms + self.lease_ms})
            pipe.zremrangebyscore(workers_key, 0, now_ms)
            pipe.zrange(workers_key, 0, -1)
            record_health(pipe, self.settings, "capture", self.consumer, **self._facts())
            pipe.hgetall(self.keys.deployment())
            replies = await pipe.execute()
        live = sorted(name.decode() for name in replies[2])
        self._reap()
        await self._follow_map(replies[-1])
        if not acquire:
            return
        fair = len(self.shards) if self.burst else fair_share(self.consumer, live, len(self.shards))
        active = [s for s, c in self.consumers.items() if not c.stop_requested]
        for shard in preference(self.consumer, self.shards):
            if len(active) >= fair:
                break
            if shard in self.consumers or shard in self._burst_done:
                continue
            if self.restart_at.get(shard, 0.0) > self.clock():  # crashed: backing off
                continue
            epoch = await self.leases.take(shard)
            if epoch is not None:
                self.restart_at.pop(shard, None)
                self._start(shard, epoch)
                active.append(shard)
        for shard in reversed(preference(self.consumer, self.shards)):  # hand back the least preferred extras
            if len(active) <= fair:
                break
            if shard in active:
                self.consumers[shard].request_stop()
                active.remove(shard)
                log.info("shard %s: handing back (%d live workers)", shard, len(live))

    async def _follow_map(self, deployment: Mapping[Any, Any]) -> None:
        """Take the deployment's shard map as read (workers.store.shard_map.follow_map), and
        adopt what older publishers still append to retired streams (workers.store.strays)."""
        shard_map, self.retired = await follow_map(self.redis, self.settings, deployment)
        if shard_map.generation != self.shard_map.generation:
            log.info("shard map: %s", shard_map)
        self.shard_map = shard_map
        await adopt_strays(self.redis, self.settings, shard_map)

    def _wait_s(self) -> float:
        """How long the loop may sleep: a third of the lease (at most CAPTURE_TICK_MAX_S), less
        when a restart is due sooner."""
        wait = min(self.lease_ms / 3000, defaults.CAPTURE_TICK_MAX_S)
        if self.restart_at:
            wait = min(wait, max(0.0, min(self.restart_at.values()) - self.clock()))
        return wait

    async def close(self) -> None:
        """Close the connections this worker opened (after ``run``; a killed worker needs it)."""
        if self._owns_ov:
            await self.ov.aclose()
        if self._owns_redis:
            await self.redis.aclose()
        if self._owns_sync_redis:
            self.sync_redis.close()
