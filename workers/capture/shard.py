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
import contextlib
import logging
from typing import Any

import redis as redis_lib

from core import defaults
from core.backoff import Backoff
from core.events import STREAM_FIELD, EventDecodeError, TurnEvent, decode
from core.shard_map import StreamShard
from workers import logs
from workers.capture.failures import EntryFailures
from workers.capture.fence import ShardFence
from workers.capture.handover import LEASE_LOST, RETIRED, predecessors_retired, retire, superseded
from workers.capture.plan import Entry, LeaseLost, session_of
from workers.capture.round import RoundOutcome, run_round
from workers.capture.services import CaptureServices
from workers.capture.slices import CpuSlice
from workers.store.connection import redis_went_away, stream_id, text
from workers.store.dead_letters import REASON_FAILED, REASON_UNDECODABLE
from workers.store.keys import Keys
from workers.store.scripts import FENCED_READ, LEASE_RELEASE
from workers.store.streams import AppliedTrim

log = logging.getLogger(__name__)

_FIRST_ENTRY_BYTES_GUESS = 64 * 1024.0
"""An entry's size before any is seen: the first read of a backlog of large events (a whole
transcript each) takes no more than ``capture_round_max_bytes`` of them."""


def _flat_fields(raw: Any) -> dict[bytes, bytes]:
    if isinstance(raw, dict):
        return raw
    it = iter(raw or [])
    return dict(zip(it, it))


class ShardConsumer:
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
        """The lease's epoch when this consumer took it (workers.store.scripts._HOLDS)."""
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
        """The newest entry id this consumer was handed (by a read, its drain or a claim): what
        is pending for it after that id was delivered to a read whose reply it never got."""
        self._own_checked_at = 0.0
        self.isolate: set[str] = set()
        """Sessions (OV ids) applied one writing entry per round after a merged write failed."""
        self.stop_requested = False
        self.lost = False
        self.released = False
        """Ended cleanly, lease given back (a later failed renewal means nothing then)."""
        self.retired = False
        """Its generation was superseded and it holds nothing more: it ended for good."""
        self.entry_bytes = _FIRST_ENTRY_BYTES_GUESS
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
                    if fetched == 0 and await self._read_own_again():
                        continue
                    if fetched == 0:  # idle: what the last rounds applied goes (at most every interval)
                        await self.trim()
                    if fetched == 0 and superseded(self) and await self._retire():
                        break
                    if self.worker.burst and fetched == 0:
                        break
                    continue
                await self._process()
        except LeaseLost:
            self.lost = True
        except Exception as exc:
            if isinstance(exc, redis_lib.ResponseError) and "NOGROUP" in str(exc) and superseded(self):
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
        await LEASE_RELEASE.run(self.redis, [self.lease_key, self.epoch_key], [self.consumer])
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

    # --- reading --------------------------------------------------------------------------------

    def _entry(self, entry_id: Any, fields: Any) -> Entry:
        raw = _flat_fields(fields)
        payload = raw.get(STREAM_FIELD.encode()) if raw else None
        entry = Entry(text(entry_id), payload)
        if payload is None:
            entry.bad = f"no {STREAM_FIELD!r} field"
            return entry
        if len(payload) > self.settings.max_body_bytes:
            entry.bad = f"event of {len(payload)} bytes is larger than maxBodyBytes={self.settings.max_body_bytes}"
            return entry
        try:
            entry.event = decode(payload, TurnEvent)
            entry.session = session_of(self.settings, entry.event)
        except (EventDecodeError, ValueError) as exc:
            entry.bad = str(exc)
            return entry
        if not self.shard.holds(entry.session.ov_session_id):
            # Applied here it would race the session's own shard (order lost), and its records
            # live under another hash tag (another Redis Cluster slot than this stream's).
            entry.bad = (
                f"session {entry.session.ov_session_id} belongs to shard "
                f"{self.shard.home_of(entry.session.ov_session_id)}, not {self.shard}"
                " (a producer with another shards count?)"
            )
        return entry

    def _wake_at(self) -> float:
        """Loop time at which something in the backlog can next be tried."""
        wakes = [max(e.retry_at for e in es) for es in self._sessions().values()]
        if any(e.bad is not None for e in self.backlog):
            wakes.append(0.0)
        return max(self.ov_down_until, min(wakes, default=0.0))

    def _ready(self, now: float) -> bool:
        return bool(self.backlog) and self._wake_at() <= now

    def _wait_s(self, now: float) -> float:
        """How long nothing in the backlog can be tried (at most the block time; while OV is
        down, at most ``CAPTURE_OV_SCOUT_S``: another shard may find it back meanwhile)."""
        block_s = self.settings.capture_block_ms / 1000
        if not self.backlog:
            return block_s
        if self.ov_down_until > now:
            block_s = min(block_s, defaults.CAPTURE_OV_SCOUT_S)
        return max(0.0, min(block_s, self._wake_at() - now))

    async def _fetch(self) -> int:
        """Read new entries into the backlog; block (briefly) only when nothing can be done.

        While reads come back full (a backlog in the stream) up to
        ``capture_reads_per_round`` of them feed one round: more entries per session
        merge into fewer OV writes and snapshot refreshes.
        """
        loop = asyncio.get_running_loop()
        room = self.settings.capture_batch * self.settings.capture_reads_per_round - len(self.backlog)
        bytes_room = self.settings.capture_round_max_bytes - sum(len(e.payload or b"") for e in self.backlog)
        if room <= 0 or bytes_room <= 0 or self.stop_requested:
            wait = self._wait_s(loop.time())
            if wait > 0 and not self._ready(loop.time()):
                with contextlib.suppress(TimeoutError):  # woken at once when OV is back
                    await asyncio.wait_for(self.woken.wait(), wait)
            self.woken.clear()
            return 0
        fetched = 0
        while room > 0 and bytes_room > 0:
            # as many entries as fit the round's bytes at the sizes seen lately (at least one)
            count = min(self.settings.capture_batch, room, max(1, int(bytes_room // self.entry_bytes)))
            try:
                reply = await FENCED_READ.run(
                    self.redis,
                    [self.stream, self.lease_key, self.epoch_key],
                    [self.consumer, self.group, count, self.epoch, self.worker.lease_ms, self.last_seen],
                )
            except redis_lib.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                await self.worker.ensure_group(self.shard)
                return fetched
            if reply == -1:
                self.lost = True
                return fetched
            if int(reply[0]) != 1:
                break
            new = await self._entries(reply[1])
            self._saw([e.id for e in new])
            self.backlog.extend(new)
            self.worker.stats.read += len(new)
            fetched += len(new)
            room -= len(new)
            got = sum(len(e.payload or b"") for e in new)
            bytes_room -= got
            if new:
                self.entry_bytes = max(256.0, (self.entry_bytes + got / len(new)) / 2)
            if len(new) < count:
                return fetched
        if fetched or room <= 0 or bytes_room <= 0:
            return fetched
        now = loop.time()
        if self.worker.burst and not self.backlog:
            return 0
        wait = self._wait_s(now)
        if self.backlog and self._ready(now):
            return 0
        block_ms = int(wait * 1000)
        if block_ms > 0:  # wake up as soon as anything newer than the stream's last id arrives
            await self.redis.xread({self.stream: text(reply[1])}, count=1, block=block_ms)
        return 0

    async def _entries(self, rows: list[Any]) -> list[Entry]:
        """Stream rows ``[id, fields]`` decoded into entries, in CPU slices."""
        cpu = CpuSlice()
        out: list[Entry] = []
        for entry_id, fields in rows:
            out.append(self._entry(entry_id, fields))
            await cpu.breathe()
        return out

    async def _drain(self) -> None:
        """Take over what earlier owners left pending, before reading anything new."""
        summary = await self.redis.xpending(self.stream, self.group)
        consumers = {text(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
        if consumers.pop(self.consumer, 0):
            await self._load_own()
        claimed = 0
        for name, pending in consumers.items():
            if pending and not self.worker.stopping:
                claimed += await self._take_over(name)
        self.backlog.sort(key=lambda e: e.order)
        await self.failures.load(self.backlog)
        self.worker.stats.claimed += claimed
        if claimed:
            log.info("shard %s: took over %d entries of earlier consumers", self.shard, claimed)
        await self._forget_idle_consumers()

    async def _load_own(self) -> None:
        last = "0"
        while True:
            reply: Any = await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: last}, count=self.settings.capture_batch
            )
            entries = reply[0][1] if reply else []
            if not entries:
                return
            await self._hold([text(entry_id) for entry_id, _ in entries], entries)
            last = text(entries[-1][0])

    async def _take_over(self, previous: str) -> int:
        """Claim every entry pending for the consumer ``previous`` (fenced: LeaseLost if the
        shard is not ours); how many were taken."""
        got = 0
        while True:
            rows = await self.redis.xpending_range(
                self.stream, self.group, "-", "+", self.settings.capture_batch, consumername=previous
            )
            ids = [text(r["message_id"]) for r in rows]
            if not ids:
                return got
            got += await self._hold(ids, await self.fence.claim(ids))

    async def _hold(self, ids: list[str], entries: list[Any]) -> int:
        """Put ``entries`` (``[id, fields]``, now pending for this consumer) in the backlog; ack
        the ``ids`` that came back without fields, or not at all: deleted from the stream while
        pending, nothing to apply. How many went into the backlog."""
        present = {text(e[0]): e[1] for e in entries if e and e[1]}
        self._saw(ids)
        self.backlog += await self._entries(list(present.items()))
        gone = [i for i in ids if i not in present]
        if gone:
            await self.fence.apply([], gone)
        return len(present)

    def _saw(self, ids: list[str]) -> None:
        """Remember the newest of ``ids`` as handed to this consumer (``last_seen``)."""
        if ids:
            self.last_seen = max([self.last_seen, *ids], key=stream_id)

    async def _read_own_again(self) -> bool:
        """Idle and holding nothing, yet entries are pending for this consumer: an XACK lost in
        a failover (Redis replicates it asynchronously, and a TAKEOVER does not wait), which
        would stay a lag that never drains. Read them again (at most every
        ``OWN_PENDING_RECHECK_S``): each is applied or, already applied, acked by the round's
        applied-offset check. Safe since the fenced read hands over what a lost reply
        delivered (``last_seen``): nothing pending was skipped for a later entry."""
        now = asyncio.get_running_loop().time()
        if now < self._own_checked_at + defaults.OWN_PENDING_RECHECK_S:
            return False
        self._own_checked_at = now
        rows = await self.redis.xpending_range(self.stream, self.group, "-", "+", 1, consumername=self.consumer)
        if not rows:
            return False
        await self._load_own()
        self.backlog.sort(key=lambda e: e.order)
        await self.failures.load(self.backlog)
        log.info(
            "shard %s: %d entries were pending for %s though it held none; read again",
            self.shard,
            len(self.backlog),
            self.consumer,
        )
        return bool(self.backlog)

    async def _forget_idle_consumers(self) -> None:
        # Consumers named after dead processes pile up in the group; drop those with nothing pending.
        for info in await self.redis.xinfo_consumers(self.stream, self.group):
            name = text(info["name"])
            if name != self.consumer and int(info["pending"]) == 0:
                await self.redis.xgroup_delconsumer(self.stream, self.group, name)

    # --- a round ----------------------------------------------------------------------------------

    def _sessions(self) -> dict[str, list[Entry]]:
        """The backlog by session, each in stream order."""
        by_session: dict[str, list[Entry]] = {}
        for entry in self.backlog:
            if entry.session is not None:
                key = entry.session.ov_session_id + "\x00" + entry.session.scope
                by_session.setdefault(key, []).append(entry)
        return by_session

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
