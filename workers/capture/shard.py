"""One shard's consumer: read, apply to OV, ack — in stream order per session.

The consumer holds the shard's lease (see workers.capture.worker). Before reading
new entries it *drains*: it takes over every entry still pending for other
consumers of the group and its own left from a previous life, and handles them
first, so a session's entries are never applied out of order across a
takeover. Holding the lease means owning every pending entry of the shard, so
the takeover claims them at once (no idle time to wait for: a dead owner's
shard moves as soon as its lease expires). New entries are read by a Lua
script that checks the lease and runs XREADGROUP atomically, and every write
is fenced the same way (workers.capture.fence): a consumer that lost its
lease can neither take new entries nor write.

Entries read but not acked stay in ``backlog`` (at most
``capture_reads_per_round x capture_batch``). Each round groups them by session and applies sessions
concurrently (workers.capture.round); a session whose entry failed waits for
its retry time, and OV being down pauses the whole shard with capped
exponential backoff, counting nothing toward the dead-letter limit.
"""

from __future__ import annotations

import asyncio
import logging

import redis as redis_lib

from core.backoff import Backoff
from core.shard_map import StreamShard
from workers import logs
from workers.capture.failures import EntryFailures
from workers.capture.fence import ShardFence
from workers.capture.handover import LEASE_LOST, RETIRED, predecessors_retired, retire, superseded
from workers.capture.plan import Entry, LeaseLost
from workers.capture.reading import FIRST_ENTRY_BYTES_GUESS, ShardReading
from workers.capture.round import RoundOutcome, run_round
from workers.capture.services import CaptureServices
from workers.store.connection import redis_went_away
from workers.store.dead_letters import REASON_FAILED, REASON_UNDECODABLE
from workers.store.keys import Keys
from workers.store.scripts import LEASE_RELEASE
from workers.store.streams import AppliedTrim

log = logging.getLogger(__name__)


class ShardConsumer(ShardReading):
    """Consumes one shard while its lease is held."""

    def __init__(self, worker: CaptureServices, shard: StreamShard, epoch: str = "") -> None:
        self.worker = worker
        self.settings = worker.settings
        self.redis = worker.redis
        self.shard = shard
        self.keys = keys = Keys(self.settings.key_prefix)
        self.stream = keys.stream(shard)
        self.lease_key = keys.capture_lease(shard)
        self.epoch_key = keys.capture_lease_epoch(shard)
        self.epoch = epoch
        """The lease's epoch when this consumer took it (workers.store.lua.HOLDS)."""
        self.group = self.settings.consumer_group
        self.consumer = worker.consumer
        self.fence = ShardFence(
            self.redis,
            shard,
            self.stream,
            self.lease_key,
            self.group,
            self.consumer,
            self.epoch_key,
            epoch,
            worker.lease_ms,
        )
        self.failures = EntryFailures(self.redis, self.settings, self.fence, worker.stats)
        self.trim = AppliedTrim(self.redis, self.stream, self.settings.overlay_stream_scan)
        self.backlog: list[Entry] = []
        self.last_seen = "0-0"
        self.own_pending_look_at = 0.0
        """Loop time of the next look for entries pending for this consumer it does not hold."""
        """The newest entry id this consumer was handed (by a read, its drain or a claim): what
        is pending for it after that id was delivered to a read whose reply it never got."""
        self.isolate: set[str] = set()
        """Sessions (OV ids) applied one writing entry per round after a merged write failed."""
        self.stop_requested = False
        self.lost = False
        self.released = False
        """Ended cleanly, lease given back (a later failed renewal means nothing then)."""
        self.retired = False
        """Its generation was superseded and it holds nothing more: it ended for good."""
        self.entry_bytes = FIRST_ENTRY_BYTES_GUESS
        """Bytes of an entry of this stream, as seen lately (sizes the reads of a round)."""
        self.ov_down_until = 0.0
        self.woken = asyncio.Event()
        """Set when OV answers again while this shard is paused (workers.capture.ov_watch.OvOutage)."""
        self.ov_failures = 0
        """Rounds in a row that found OV unavailable (the shard's pause is ``core.backoff`` of it)."""
        self.task: asyncio.Task[None] | None = None
        self.started_at = 0.0
        """``worker.clock()`` when the worker started this consumer."""

    # --- lifecycle -------------------------------------------------------------------------

    def request_stop(self) -> None:
        self.stop_requested = True

    async def run(self) -> None:
        # this consumer's own task: every line it logs names the shard
        logs.SHARD.set(self.shard.number if self.shard.generation == 0 else str(self.shard))
        try:
            if not await predecessors_retired(self):
                return await self._release()
            await self.worker.ensure_group(self.shard)  # a stream only publishers wrote to yet
            await self._drain()
            while not self.lost and not (self.stop_requested and (not self.backlog or self.worker.stopping)):
                fetched = await self._fetch()
                if self.lost:
                    break
                if not self.backlog:
                    if fetched == 0:  # idle: what the last rounds applied goes (at most every interval)
                        await self.trim()
                        if await self.take_back_own():
                            continue
                    if fetched == 0 and superseded(self) and await self._retire():
                        break
                    if self.worker.burst and fetched == 0:
                        break
                    continue
                await self._process()
        except LeaseLost:
            self.lost = True
        except Exception as exc:
            if _stream_gone(exc) and superseded(self):
                # an old generation's stream its previous holder retired (and deleted) between
                # this consumer's taking it and reading it: nothing is left in it to apply
                log.info("shard %s: retired while being taken over; released", self.shard)
                return await self._release()
            if not redis_went_away(exc):
                raise
            # Redis away (a restart, a failover): not this consumer's fault, so no crash and no
            # backoff; the worker takes the shard again (its own lease, if it survived) once
            # Redis answers, and the new consumer starts by draining what this one held.
            await self.worker.redis_unavailable(exc, f"shard {self.shard}")
            return
        if self.lost:
            log.warning("shard %s: lease lost; %d held entries left for the next owner", self.shard, len(self.backlog))
            return
        await self._release()

    async def _release(self) -> None:
        await LEASE_RELEASE.run(self.redis, [self.lease_key, self.epoch_key], [self.consumer, self.epoch])
        self.released = True
        log.info("shard %s released by %s", self.shard, self.consumer)

    def check_lease(self) -> None:
        if self.lost:
            raise LeaseLost(self.shard)

    async def _retire(self) -> bool:
        verdict = await retire(self)
        if verdict == LEASE_LOST:
            self.lost = True
        self.retired = verdict == RETIRED
        return self.retired

    # --- a round ----------------------------------------------------------------------------------

    async def _process(self) -> None:
        loop = asyncio.get_running_loop()
        dead = [(e, REASON_UNDECODABLE, e.bad) for e in self.backlog if e.bad is not None]
        if dead:
            await self.dead_letter(dead)
        now = loop.time()
        # a session waits while any of its entries does (the later ones queue behind a failed one)
        ready = [es for es in self._sessions().values() if max(e.retry_at for e in es) <= now]
        acked = bool(dead)
        if ready and now >= self.ov_down_until:
            outcome = await run_round(self, ready)
            self._settle(outcome, loop.time())
            acked = acked or bool(outcome.acked)
        if acked:  # after the round's snapshot refresh: what goes is in OV and in the snapshot
            await self.trim()

    def _settle(self, outcome: RoundOutcome, now: float) -> None:
        done = {e.id for e in outcome.acked}
        if done:
            self.backlog = [e for e in self.backlog if e.id not in done]
        for sid in outcome.isolate:
            self.isolate.add(sid)
        pending_sids = {e.session.ov_session_id for e in self.backlog if e.session}
        self.isolate &= pending_sids
        if outcome.unavailable:
            self.ov_failures += 1
            backoff_s = Backoff(self.settings.ov_backoff_s, self.settings.capture_ov_down_backoff_max_s).delay(
                self.ov_failures
            )
            pause_s = self.worker.ov_pause_s(self, backoff_s)
            self.ov_down_until = now + pause_s
            log.log(
                logging.WARNING if self.ov_failures == 1 else logging.DEBUG,  # one warning per outage
                "shard %s: OV unavailable (%s); retrying in %.2fs, nothing acked",
                self.shard,
                outcome.unavailable,
                pause_s,
            )
        elif done:
            if self.ov_failures:
                woken = self.worker.ov_back()
                log.info(
                    "shard %s: OV reachable again%s", self.shard, f"; {woken} paused shard(s) woken" if woken else ""
                )
            self.ov_failures = 0

    async def record_failure(self, entry: Entry, error: BaseException) -> None:
        """A handler failure of ``entry``: retry later, or dead-letter it past the limit. A dead
        letter being released retries with its release marker, and past the limit ends the
        release (the session stays parked, workers.capture.parking)."""
        past_limit = await self.failures.record(entry, error, REASON_FAILED)
        if entry.letter is None:
            if past_limit:
                self.backlog = [e for e in self.backlog if e.id != entry.id]
            return
        marker = self._release_marker(entry)
        if marker is None:
            return
        if not past_limit:
            marker.retry_at = entry.retry_at
            return
        await self.fence.apply(self.failures.forget([entry]), [marker.id])
        self.backlog = [e for e in self.backlog if e.id != marker.id]
        log.error(
            "shard %s: dead letter %s (entry %s) failed again: %s; session %s stays parked"
            " (`ovstream dlq drop %s` gives it up, then `ovstream dlq replay`)",
            self.shard,
            entry.letter,
            entry.id,
            error,
            entry.session.ov_session_id if entry.session else "?",
            entry.letter,
        )

    def _release_marker(self, letter: Entry) -> Entry | None:
        """The release marker in the backlog that released ``letter``'s session."""
        for e in self.backlog:
            if e.session == letter.session and e.event is not None and e.event.release:
                return e
        return None

    async def dead_letter(self, items: list[tuple[Entry, str, str]]) -> None:
        """Dead-letter ``items`` (entry, reason, error) and drop them from the backlog."""
        await self.failures.dead_letter(items)
        gone = {e.id for e, _, _ in items}
        self.backlog = [e for e in self.backlog if e.id not in gone]


def _stream_gone(exc: BaseException) -> bool:
    """Redis's answer to a read of a stream deleted under it: NOGROUP from XREADGROUP and
    XPENDING, "no such key" from XINFO (the drain's last step: a live reshard's retirement
    came between them, and the consumer crashed with a traceback)."""
    said = str(exc)
    return isinstance(exc, redis_lib.ResponseError) and ("NOGROUP" in said or "no such key" in said)
