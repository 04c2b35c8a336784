"""A shard's writes, each made only while its consumer holds the shard's lease.

Every change capture makes to a shard's Redis state goes through here, and each
is one script that checks the lease first (workers.store.scripts): taking
entries over (``claim``), recording a write intent and acking (``apply``). The
lease, the stream and the sessions' applied hashes share the shard's hash tag,
so each script touches one slot.

What no script can fence is the OV write itself (OV has no conditional append).
A consumer that stalls past its lease *between* recording its intent and
sending the write (microseconds, unless the process is frozen right there)
could still add messages after the next owner settled that intent; its ack is
then refused and logged. Everything else a stale consumer tries is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from core.shard_map import StreamShard
from workers.capture.plan import LeaseLost
from workers.store.scripts import FENCED_APPLY, FENCED_CLAIM


@dataclass(frozen=True, slots=True)
class HashWrite:
    """Fields to set and fields to delete in one of the shard's hashes; ``px`` > 0: the hash
    (when fields are set) lives that many ms from now; ``KEEP``: it lives until deleted."""

    key: str
    set: dict[str, str]
    delete: tuple[str, ...] = ()
    px: int = 0


KEEP = -1
"""``HashWrite.px``: the hash loses its time to live (a parked session's state waits for an operator)."""


@dataclass(frozen=True, slots=True)
class ShardFence:
    """The fenced writes of one shard consumer (``consumer`` in ``group``, holding ``lease``).

    ``epoch`` is the lease's epoch when this consumer took it (``Keys.capture_lease_epoch``,
    the counter at ``epoch_key``): a lease that lapsed untouched since is taken back for
    ``lease_ms`` by the write itself. Without an epoch a lapsed lease refuses the write.
    """

    redis: aioredis.Redis
    shard: StreamShard
    stream: str
    lease: str
    group: str
    consumer: str
    epoch_key: str = ""
    epoch: str = ""
    lease_ms: int = 0

    async def claim(self, ids: Sequence[str]) -> list[Any]:
        """Make ``ids`` pending for this consumer: the entries that still exist, as
        ``[id, fields]``. LeaseLost when the shard is not ours."""
        if not ids:
            return []
        reply = await FENCED_CLAIM.run(
            self.redis,
            [self.stream, self.lease, self.epoch_key or self.lease],
            [self.consumer, self.group, self.epoch, self.lease_ms, *ids],
        )
        if reply == -1:
            raise LeaseLost(self.shard)
        return list(reply)

    async def apply(self, hashes: Sequence[HashWrite], ack: Sequence[str] = ()) -> None:
        """Write ``hashes`` and XACK ``ack``, all or nothing; LeaseLost when the shard is not ours."""
        plan = {
            "hashes": [
                {"set": [x for kv in h.set.items() for x in kv], "del": list(h.delete), "px": h.px} for h in hashes
            ],
            "ack": list(ack),
        }
        keys = [self.lease, self.epoch_key or self.lease, self.stream, *(h.key for h in hashes)]
        args: list[str | int] = [
            self.consumer,
            self.group,
            json.dumps(plan, separators=(",", ":")),
            self.epoch,
            self.lease_ms,
        ]
        if await FENCED_APPLY.run(self.redis, keys, args) == -1:
            raise LeaseLost(self.shard)
