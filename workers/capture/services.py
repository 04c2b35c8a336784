"""What a shard consumer and its rounds need from the capture worker running them.

``CaptureWorker`` provides it; ``ShardConsumer`` and ``run_round`` are typed
against this Protocol, so the three modules import downwards only
(worker -> shard -> round -> services).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis

from core.config import Settings
from core.events import CommitReason, ContextSnapshot
from core.ov.client import OVClient
from core.redaction import SessionPlaceholders
from core.shard_map import ShardMap, StreamShard
from workers.capture.erased import Tombstones
from workers.capture.ov_watch import Pausable
from workers.capture.plan import SKIP_SETTLED, SessionRef, SessionRound
from workers.capture.settle import RecordedStates


@dataclass(slots=True)
class CaptureStats:
    read: int = 0
    claimed: int = 0
    applied: int = 0
    skipped: int = 0
    settled: int = 0
    """Entries an earlier owner wrote to OV and could not ack, found written and acked here."""
    messages_written: int = 0
    ov_writes: int = 0
    failures: int = 0
    dead_lettered: int = 0
    commits_requested: int = 0
    snapshots: int = 0
    longest_renewal_gap_s: float = 0.0
    """The longest time between two renewals of the leases this worker held (loop time)."""

    def count_applied(self, plan: SessionRound) -> None:
        # Written by an owner that lost the shard before its ack, settled here from its intent
        # though this round does not hold them (pending elsewhere: they come later, applied before)
        self.settled += len(plan.state.settled_ids - {u.entry.id for u in plan.units})
        for unit in plan.units:
            if unit.skip == SKIP_SETTLED:  # written by an owner that lost the shard before its ack
                self.settled += 1
            elif unit.skip:
                self.skipped += 1
            else:
                self.applied += 1
        if plan.messages:
            self.ov_writes += 1
            self.messages_written += plan.added


class CaptureServices(Protocol):
    """The capture worker as its shard consumers see it."""

    settings: Settings
    redis: aioredis.Redis
    consumer: str
    lease_ms: int
    burst: bool
    stopping: bool
    stats: CaptureStats
    clock: Callable[[], float]
    shard_map: ShardMap
    recorded: RecordedStates
    numbering: SessionPlaceholders
    tombstones: Tombstones
    """The erased scopes' tombstones, as last read (workers.capture.erased)."""
    """Each session's placeholder numbering (core.redaction), while this process lives."""
    """What this process last recorded of each session (a Redis that lost writes shows older)."""

    @property
    def ov_slots(self) -> asyncio.Semaphore: ...

    def fault(self, step: str) -> None:
        """Run the test fault hook at ``step`` (may raise WorkerKilled)."""

    def ov_for(self, session: SessionRef) -> OVClient:
        """An OV client acting as the session's agent and tenant."""

    async def ensure_group(self, shard: int | StreamShard) -> None:
        """Create the shard's consumer group when it is missing."""

    async def request_commit(self, session: SessionRef, reason: CommitReason = "threshold") -> None:
        """Ask for a commit of the session."""

    def ov_pause_s(self, shard: Pausable, backoff_s: float) -> float:
        """How long ``shard`` pauses after a round that found OV failing (workers.capture.ov_watch)."""

    def ov_back(self) -> int:
        """OV took a write: every paused shard tries now; how many were woken."""

    async def redis_unavailable(self, exc: BaseException, who: str) -> None:
        """Redis is away or full: logged once per outage."""

    def snapshot_refreshed(self, snapshot: ContextSnapshot) -> None:
        """A snapshot was stored (stats, the test hook)."""
