"""What counts against a turn event, and where it goes when it failed too often.

Only an error raised while applying an entry counts (``record``): its count lives in Redis
(``Keys.capture_failures``, written fenced), so it survives a restart or a takeover, and
past ``maxDeliveries`` the entry is copied to the dead-letter stream and acked. Being read
again is not a failure: a slow round that lost its lease, a restart and a takeover all
re-claim entries (the stream's own delivery count rises), and a healthy backlog on a busy
machine must never end in the dead letters for it (docs/FAILURE-MODES.md, what counts).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import redis.asyncio as aioredis

from core.config import Settings
from workers.capture.fence import KEEP, HashWrite, ShardFence
from workers.capture.plan import Entry
from workers.capture.redacting import redacted_payload
from workers.capture.services import CaptureStats
from workers.store.applied import PARKED
from workers.store.connection import text
from workers.store.dead_letters import REASON_FAILED, REASON_PARKED, dead_letter_fields
from workers.store.keys import Keys
from workers.store.usage import TALLY

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EntryFailures:
    """The failure counts and dead letters of one shard consumer's entries."""

    redis: aioredis.Redis
    settings: Settings
    fence: ShardFence
    stats: CaptureStats

    @property
    def key(self) -> str:
        return Keys(self.settings.key_prefix).capture_failures(self.fence.shard)

    async def load(self, entries: list[Entry]) -> None:
        """Set the failure counts of ``entries`` taken over from earlier consumers."""
        for start in range(0, len(entries), self.settings.capture_batch):
            chunk = entries[start : start + self.settings.capture_batch]
            counts = await self.redis.hmget(self.key, [e.id for e in chunk])
            for entry, count in zip(chunk, counts):
                entry.failures = int(count or 0)

    def forget(self, entries: list[Entry]) -> list[HashWrite]:
        """The fenced write dropping the counts of ``entries`` (being acked or dead-lettered)."""
        failed = tuple(e.id for e in entries if e.failures)
        return [HashWrite(self.key, {}, failed)] if failed else []

    async def record(self, entry: Entry, error: BaseException, reason: str) -> bool:
        """Count a failure of ``entry``; past the limit dead-letter it with ``reason`` (True; a
        dead letter being released is one already: the caller ends its release), else set when
        it may be tried again (False)."""
        failures = entry.failures + 1
        entry.failures = failures
        if failures > self.settings.max_deliveries:
            if entry.letter is None:
                await self.dead_letter([(entry, reason, f"{type(error).__name__}: {error}")])
            return True
        # kept as long as a snapshot: a count whose entry went while nobody held the shard goes then
        kept_ms = self.settings.snapshot_ttl_s * 1000
        await self.fence.apply([HashWrite(self.key, {entry.id: str(failures)}, px=kept_ms)])
        delay = min(
            self.settings.capture_retry_backoff_max_s,
            max(self.settings.ov_backoff_s, 0.01) * 2 ** (failures - 1),
        )
        entry.retry_at = asyncio.get_running_loop().time() + delay
        self.stats.failures += 1
        log.warning(
            "shard %s: entry %s failed (failure %d of %d): %s; retry in %.2fs",
            self.fence.shard,
            entry.id,
            failures,
            self.settings.max_deliveries,
            error,
            delay,
        )
        return False

    async def dead_letter(self, items: list[tuple[Entry, str, str]]) -> None:
        """Copy entries to the dead-letter stream with their reason, then ack them (fenced: a
        copy made just before the lease was lost is made again by the next owner, never lost).
        An entry of a session is kept in the session's parked index, and one that failed parks
        its session (workers.capture.parking), in the same fenced write as the ack."""
        dlq = Keys(self.settings.key_prefix).dead_letters()
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry, reason, error in items:
                pipe.xadd(
                    dlq,
                    dead_letter_fields(
                        stream=self.fence.stream,
                        entry_id=entry.id,
                        payload=redacted_payload(self.settings, entry),  # kept: no secret in it
                        reason=reason,
                        error=error,
                        deliveries=entry.failures,
                        consumer=self.fence.consumer,
                    ),
                )  # uncapped: a dead letter is a turn kept for an operator, never dropped
            dlq_ids = await pipe.execute()
        parks: list[HashWrite] = []
        for (entry, reason, _), dlq_id in zip(items, dlq_ids):
            if entry.session is None or reason not in (REASON_FAILED, REASON_PARKED):
                continue  # undecodable, or another shard's: no session of this shard to park
            parks.append(HashWrite(entry.session.parked_key, {entry.id: text(dlq_id)}))
            if reason == REASON_FAILED:
                parks.append(HashWrite(entry.session.applied_key, {PARKED: entry.id}, px=KEEP))
        await self.fence.apply(parks + self.forget([e for e, _, _ in items]), [e.id for e, _, _ in items])
        self.stats.dead_lettered += len(items)
        for entry, _, _ in items:  # undecodable ones (no session): the deployment's own user's
            TALLY.add(entry.session.address.tenant if entry.session else None, "dead_letters")
        for entry, reason, error in items:
            if reason != REASON_PARKED:  # those behind it are said once a round (workers.capture.parking)
                log.error("shard %s: entry %s dead-lettered (%s): %s", self.fence.shard, entry.id, reason, error)
