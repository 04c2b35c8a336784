"""How a shard consumer reads its stream (workers.capture.shard): new entries through the
fenced read (which hands over first what a read whose reply was lost delivered), the entries
earlier owners left pending (its drain at the start), and how long it waits when nothing in its
backlog can be tried.

A mixin of ``ShardConsumer``: the state it reads and writes is the consumer's, declared here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import redis as redis_lib
import redis.asyncio as aioredis

from core import defaults
from core.config import Settings
from core.events import STREAM_FIELD, EventDecodeError, TurnEvent, decode
from core.shard_map import StreamShard
from workers.capture.failures import EntryFailures
from workers.capture.fence import ShardFence
from workers.capture.plan import Entry, session_of
from workers.capture.slices import CpuSlice
from workers.store.connection import stream_id, text
from workers.store.scripts import FENCED_READ

if TYPE_CHECKING:
    from workers.capture.services import CaptureServices

log = logging.getLogger("workers.capture.shard")  # the consumer's lines, as before the split

FIRST_ENTRY_BYTES_GUESS = 64 * 1024.0
"""An entry's size before any is seen: the first read of a backlog of large events (a whole
transcript each) takes no more than ``capture_round_max_bytes`` of them."""


def _flat_fields(raw: Any) -> dict[bytes, bytes]:
    if isinstance(raw, dict):
        return raw
    it = iter(raw or [])
    return dict(zip(it, it))


class ShardReading:
    """Reading and waiting, for ``ShardConsumer``."""

    worker: CaptureServices
    settings: Settings
    redis: aioredis.Redis
    shard: StreamShard
    stream: str
    group: str
    consumer: str
    epoch: str
    lease_key: str
    epoch_key: str
    fence: ShardFence
    failures: EntryFailures
    backlog: list[Entry]
    stop_requested: bool
    lost: bool
    entry_bytes: float
    ov_down_until: float
    woken: asyncio.Event
    last_seen: str
    own_pending_look_at: float

    def _sessions(self) -> dict[str, list[Entry]]:
        """The backlog by session, each in stream order."""
        by_session: dict[str, list[Entry]] = {}
        for entry in self.backlog:
            if entry.session is not None:
                key = entry.session.ov_session_id + "\x00" + entry.session.scope
                by_session.setdefault(key, []).append(entry)
        return by_session

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
                    async with asyncio.timeout(wait):
                        await self.woken.wait()
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

    async def take_back_own(self) -> int:
        """When idle, at most every ``OWN_PENDING_LOOK_S``: take back the entries pending for this
        consumer that it does not hold, idle for ``OWN_PENDING_IDLE_S``, into the backlog (they
        are applied, or found applied and acked, as a new owner's drain does). Redis can hand
        them back to a consumer that acked them: a failover (or a cluster TAKEOVER) to a node
        that never got the XACK makes them pending again under the same name, older than
        anything the fenced read hands over. The idle time leaves OV's count a write's time to
        settle, so a write whose ack was lost is found in OV, not written again."""
        loop_now = asyncio.get_running_loop().time()
        if loop_now < self.own_pending_look_at:
            return 0
        self.own_pending_look_at = loop_now + defaults.OWN_PENDING_LOOK_S
        rows = await self.redis.xpending_range(
            self.stream,
            self.group,
            "-",
            "+",
            self.settings.capture_batch,
            consumername=self.consumer,
            idle=int(defaults.OWN_PENDING_IDLE_S * 1000),
        )
        held = {e.id for e in self.backlog}
        ids = [i for i in (text(r["message_id"]) for r in rows) if i not in held]
        if not ids:
            return 0
        taken = await self._hold(ids, await self.fence.claim(ids))
        self.backlog.sort(key=lambda e: e.order)
        await self.failures.load(self.backlog)
        log.info(
            "shard %s: %d entries pending for this consumer and not held (an ack lost in a failover) taken back: %s",
            self.shard,
            taken,
            " ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""),
        )
        return taken

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

    async def _forget_idle_consumers(self) -> None:
        # Consumers named after dead processes pile up in the group; drop those with nothing pending.
        for info in await self.redis.xinfo_consumers(self.stream, self.group):
            name = text(info["name"])
            if name != self.consumer and int(info["pending"]) == 0:
                await self.redis.xgroup_delconsumer(self.stream, self.group, name)
