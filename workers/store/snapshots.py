"""The session's ContextSnapshot: OV /context cached in Redis for assemble.

Capture refreshes it after every applied batch, the commit jobs after each
commit; assemble reads it. A snapshot is tagged with the last stream entry it
reflects, and a Lua script keeps the stored one from going back in time: a
write lands only when its stream id is newer, or equal and its OV read began
no earlier than the stored one's (a commit changes the context without a new
entry). Snapshots of idle sessions expire after ``snapshot_ttl_s``.

``fetch_snapshot`` only reads OV (the caller supplies the applied offset);
``store_snapshot`` queues the write on whatever client or pipeline it is
given (capture's is async); ``refresh_snapshot`` and ``read_snapshot`` use a
sync client (the commit jobs and the RPC).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from core.config import Settings
from core.events import ContextSnapshot, decode, encode
from core.session import SessionAddress
from workers.store.applied import AppliedState
from workers.store.keys import Keys

log = logging.getLogger(__name__)

# KEYS[1] snapshot hash. ARGV: stream id, fetched_ms, data, ttl_ms.
# Returns {1} when written, {0, stored data} when the stored one is newer.
_WRITE_IF_NEWER = """
local cur = redis.call('HMGET', KEYS[1], 'id', 'fetched_ms', 'data')
if cur[1] and cur[3] then
  local cms, cseq = string.match(cur[1], '^(%d+)-(%d+)$')
  local nms, nseq = string.match(ARGV[1], '^(%d+)-(%d+)$')
  cms, cseq, nms, nseq = tonumber(cms), tonumber(cseq), tonumber(nms), tonumber(nseq)
  local older = nms < cms or (nms == cms and nseq < cseq)
  local same = nms == cms and nseq == cseq
  if older or (same and tonumber(ARGV[2]) < tonumber(cur[2] or '0')) then
    return {0, cur[3]}
  end
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'fetched_ms', ARGV[2], 'data', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}
"""

ZERO_ID = "0-0"


def snapshot_key(settings: Settings, address: SessionAddress) -> str:
    return Keys(settings.key_prefix).session(address, settings.shards).snapshot


def read_applied(redis: Any, settings: Settings, address: SessionAddress) -> AppliedState:
    """The session's applied offset (sync client)."""
    key = Keys(settings.key_prefix).session(address, settings.shards).applied
    return AppliedState.from_hash(redis.hgetall(key))


async def fetch_snapshot(
    ov: Any, settings: Settings, address: SessionAddress, applied: AppliedState
) -> tuple[ContextSnapshot, int]:
    """Read OV /context into a snapshot; returns it with the time (ms) the read began.

    ``applied`` is the session's applied offset the content reflects: capture
    passes the one it just wrote; others read it *before* OV (``read_applied``),
    so the tag never claims more than the content holds.
    """
    fetched_ms = int(time.time() * 1000)
    ctx = await ov.get_context(address.ov_session_id, token_budget=settings.snapshot_token_budget)
    snapshot = ContextSnapshot(
        ov_session_id=address.ov_session_id,
        agent_id=address.agent_id,
        user=address.tenant,
        latest_archive_overview=ctx.latest_archive_overview or "",
        pre_archive_abstracts=[a if isinstance(a, dict) else {"abstract": a} for a in ctx.pre_archive_abstracts],
        messages=list(ctx.messages),
        estimated_tokens=ctx.estimated_tokens,
        total_archives=ctx.stats.total_archives,
        failed_archives=ctx.stats.failed_archives,
        applied_stream_id=applied.last_id or ZERO_ID,
        captured_through=applied.captured,
        event_ids=list(applied.event_ids),
        advancements=list(applied.advancements),
        refreshed_at=time.time(),
    )
    return snapshot, fetched_ms


def store_snapshot(redis_or_pipe: Any, settings: Settings, snapshot: ContextSnapshot, fetched_ms: int) -> Any:
    """Issue the write-if-newer script (on a client, or queued on a pipeline)."""
    key = snapshot_key(settings, SessionAddress(snapshot.ov_session_id, snapshot.agent_id, snapshot.user))
    return redis_or_pipe.eval(
        _WRITE_IF_NEWER,
        1,
        key,
        snapshot.applied_stream_id,
        fetched_ms,
        encode(snapshot),
        settings.snapshot_ttl_s * 1000,
    )


def stored_snapshot(snapshot: ContextSnapshot, reply: Any) -> ContextSnapshot:
    """What the store left: ``snapshot`` when it was written, else the newer one it kept."""
    if int(reply[0]) == 1:
        log.debug("snapshot of %s refreshed at %s", snapshot.ov_session_id, snapshot.applied_stream_id)
        return snapshot
    log.debug("snapshot of %s at %s not stored: a newer one is", snapshot.ov_session_id, snapshot.applied_stream_id)
    return decode(reply[1], ContextSnapshot)


async def refresh_snapshot(
    redis: Any, ov: Any, settings: Settings, address: SessionAddress, applied: AppliedState | None = None
) -> ContextSnapshot:
    """Read OV /context and store it as the session's snapshot unless a newer one is stored.

    ``redis`` is a sync client; ``ov`` an OVClient already scoped to the session's
    agent and tenant; ``applied`` the offset the content reflects (read from
    Redis when not given). Returns the snapshot now stored (the newer one when
    this refresh lost).
    """
    if applied is None:
        applied = read_applied(redis, settings, address)
    snapshot, fetched_ms = await fetch_snapshot(ov, settings, address, applied)
    return stored_snapshot(snapshot, store_snapshot(redis, settings, snapshot, fetched_ms))


def _decode_stored(raw: bytes | None) -> ContextSnapshot | None:
    if raw is None:
        return None
    try:
        return decode(raw, ContextSnapshot)
    except (ValueError, msgspec.DecodeError):
        log.warning("unreadable snapshot ignored")
        return None


def read_snapshot(redis: Any, settings: Settings, address: SessionAddress) -> ContextSnapshot | None:
    """The stored snapshot (sync client), or None when there is none or it expired."""
    return _decode_stored(redis.hget(snapshot_key(settings, address), "data"))
