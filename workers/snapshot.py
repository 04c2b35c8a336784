"""The session's ContextSnapshot: OV /context cached in Redis for assemble.

Capture refreshes it after every applied batch, the commit jobs after each
commit; assemble reads it. A snapshot is tagged with the last stream entry it
reflects, and a Lua script keeps the stored one from going back in time: a
write lands only when its stream id is newer, or equal and its OV read began
no earlier than the stored one's (a commit changes the context without a new
entry). Snapshots of idle sessions expire after ``snapshot_ttl_s``.

Works with a sync or an asyncio Redis client (the capture worker is async,
RQ jobs are sync).
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

import msgspec

from core.config import Settings
from core.events import ContextSnapshot, decode, encode
from core.keys import Keys, scope_of, shard_of
from workers.capture_applied import AppliedState

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


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def snapshot_key(settings: Settings, *, ov_session_id: str, agent_id: str, user: str | None) -> str:
    return Keys(settings.key_prefix).snapshot(
        shard_of(ov_session_id, settings.shards), scope_of(user, agent_id), ov_session_id
    )


async def fetch_snapshot(
    redis: Any,
    ov: Any,
    settings: Settings,
    *,
    ov_session_id: str,
    agent_id: str,
    user: str | None,
    applied: AppliedState | None = None,
) -> tuple[ContextSnapshot, int]:
    """Read OV /context into a snapshot; returns it with the time (ms) the read began.

    ``applied`` is the session's applied offset the content reflects (capture
    passes the one it just wrote). Without it (a commit job) the offset is read
    here, *before* OV, so the tag never claims more than the content holds.
    """
    if applied is None:
        shard, scope = shard_of(ov_session_id, settings.shards), scope_of(user, agent_id)
        applied_key = Keys(settings.key_prefix).applied(shard, scope, ov_session_id)
        applied = AppliedState.from_hash(await _resolved(redis.hgetall(applied_key)))
    fetched_ms = int(time.time() * 1000)
    ctx = await ov.get_context(ov_session_id, token_budget=settings.snapshot_token_budget)
    snapshot = ContextSnapshot(
        ov_session_id=ov_session_id,
        agent_id=agent_id,
        user=user,
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
    key = snapshot_key(settings, ov_session_id=snapshot.ov_session_id, agent_id=snapshot.agent_id,
                       user=snapshot.user)
    return redis_or_pipe.eval(_WRITE_IF_NEWER, 1, key, snapshot.applied_stream_id, fetched_ms, encode(snapshot),
                              settings.snapshot_ttl_s * 1000)


def stored_snapshot(snapshot: ContextSnapshot, reply: Any) -> ContextSnapshot:
    """What the store left: ``snapshot`` when it was written, else the newer one it kept."""
    if int(reply[0]) == 1:
        log.debug("snapshot of %s refreshed at %s", snapshot.ov_session_id, snapshot.applied_stream_id)
        return snapshot
    log.debug("snapshot of %s at %s not stored: a newer one is", snapshot.ov_session_id,
              snapshot.applied_stream_id)
    return decode(reply[1], ContextSnapshot)


async def refresh_snapshot(
    redis: Any,
    ov: Any,
    settings: Settings,
    *,
    ov_session_id: str,
    agent_id: str,
    user: str | None,
    applied: AppliedState | None = None,
) -> ContextSnapshot:
    """Read OV /context and store it as the session's snapshot unless a newer one is stored.

    ``ov`` is an OVClient already scoped to the session's agent and user. See
    ``fetch_snapshot`` for the tags. Returns the snapshot now stored (the newer
    one when this refresh lost).
    """
    snapshot, fetched_ms = await fetch_snapshot(
        redis, ov, settings, ov_session_id=ov_session_id, agent_id=agent_id, user=user, applied=applied)
    reply = await _resolved(store_snapshot(redis, settings, snapshot, fetched_ms))
    return stored_snapshot(snapshot, reply)


def _decode_stored(raw: bytes | None) -> ContextSnapshot | None:
    if raw is None:
        return None
    try:
        return decode(raw, ContextSnapshot)
    except (ValueError, msgspec.DecodeError):
        log.warning("unreadable snapshot ignored")
        return None


def read_snapshot(redis: Any, settings: Settings, *, ov_session_id: str, agent_id: str,
                  user: str | None) -> ContextSnapshot | None:
    """The stored snapshot (sync client), or None when there is none or it expired."""
    key = snapshot_key(settings, ov_session_id=ov_session_id, agent_id=agent_id, user=user)
    return _decode_stored(redis.hget(key, "data"))


async def aread_snapshot(redis: Any, settings: Settings, *, ov_session_id: str, agent_id: str,
                         user: str | None) -> ContextSnapshot | None:
    """``read_snapshot`` for an asyncio client."""
    key = snapshot_key(settings, ov_session_id=ov_session_id, agent_id=agent_id, user=user)
    return _decode_stored(await redis.hget(key, "data"))
