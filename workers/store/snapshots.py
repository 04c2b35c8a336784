"""The session's ContextSnapshot: OV /context cached in Redis for assemble.

Capture updates it after every applied batch (grown by the written messages when
core.snapshot_growth says that is OV's answer, else read from OV), the commit jobs
after each commit; assemble reads it. A snapshot is tagged with the last stream entry it
reflects, and a Lua script keeps the stored one from going back in time: a
write lands only when its stream id is newer, or equal and its OV read began
no earlier than the stored one's (a commit changes the context without a new
entry). Snapshots of idle sessions expire after ``snapshot_ttl_s``.

The store never calls OV: a snapshot is made from OV's answer (``snapshot_from``), or
from a ``ContextRead`` the caller's OV client answers. Everything here takes an asyncio
client (or pipeline): the readers and writers of snapshots run on event loops (capture, the
RPC), but for the commit jobs' refresh after a commit, on their own threads
(``refresh_snapshot_on_thread``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import redis
import redis.asyncio as aioredis
from redis.typing import EncodableT

from core.config import Settings
from core.events import ContextSnapshot, decode, encode
from core.messages.tokens import compact_json, estimate_tokens
from core.ov.messages import OVMessage
from core.ov.models import SessionContext
from core.session import SessionAddress
from workers.store.applied import AppliedState
from workers.store.keys import session_keys
from workers.store.scripts import SNAPSHOT_WRITE_IF_NEWER

log = logging.getLogger(__name__)

ZERO_ID = "0-0"
ContextRead = Callable[[], Awaitable[SessionContext]]
"""A read of the session's OV /context (``functools.partial(ov.get_context, ...)``)."""


def snapshot_key(settings: Settings, address: SessionAddress) -> str:
    return session_keys(settings, address).snapshot


async def read_applied(redis: aioredis.Redis, settings: Settings, address: SessionAddress) -> AppliedState:
    """The session's applied offset."""
    key = session_keys(settings, address).applied
    return AppliedState.from_hash(await redis.hgetall(key))


def snapshot_from(context: SessionContext, address: SessionAddress, applied: AppliedState) -> ContextSnapshot:
    """OV's /context answer as the session's snapshot, tagged with ``applied``: the session's
    applied offset the content reflects (capture passes the one it just wrote; others read it
    *before* asking OV, ``read_applied``, so the tag never claims more than the content holds)."""
    return ContextSnapshot(
        ov_session_id=address.ov_session_id,
        agent_id=address.agent_id,
        user=address.tenant,
        latest_archive_overview=context.latest_archive_overview or "",
        pre_archive_abstracts=[a if isinstance(a, dict) else {"abstract": a} for a in context.pre_archive_abstracts],
        messages=list(context.messages),
        estimated_tokens=context.estimated_tokens,
        total_archives=context.stats.total_archives,
        failed_archives=context.stats.failed_archives,
        **_applied_tags(applied),
    )


def _applied_tags(applied: AppliedState) -> dict[str, Any]:
    """The fields of a snapshot that say which applied entries it reflects."""
    return {
        "applied_stream_id": applied.last_id or ZERO_ID,
        "captured_through": applied.captured,
        "event_ids": list(applied.event_ids),
        "advancements": list(applied.advancements),
        "refreshed_at": time.time(),
    }


def grown_snapshot(stored: ContextSnapshot, records: list[OVMessage], applied: AppliedState) -> ContextSnapshot:
    """``stored`` with ``records`` as its messages (core.snapshot_growth decided they are what
    OV holds) and the tags of ``applied``; its token estimate grows by the new records'."""
    new = records[len(stored.messages) :]
    added_tokens = estimate_tokens(compact_json([m.parts for m in new]))
    return msgspec.structs.replace(
        stored, messages=records, estimated_tokens=stored.estimated_tokens + added_tokens, **_applied_tags(applied)
    )


async def store_snapshot(
    redis: aioredis.Redis | aioredis.client.Pipeline, settings: Settings, snapshot: ContextSnapshot, fetched_ms: int
) -> Any:
    """Run the write-if-newer script (on a pipeline: queue it; the reply comes from ``execute``)."""
    return await SNAPSHOT_WRITE_IF_NEWER.run(redis, *_write(settings, snapshot, fetched_ms))


def _write(settings: Settings, snapshot: ContextSnapshot, fetched_ms: int) -> tuple[list[str], list[EncodableT]]:
    """The write-if-newer script's keys and arguments."""
    key = snapshot_key(settings, SessionAddress(snapshot.ov_session_id, snapshot.agent_id, snapshot.user))
    return [key], [snapshot.applied_stream_id, fetched_ms, encode(snapshot), settings.snapshot_ttl_s * 1000]


def refresh_snapshot_on_thread(
    client: redis.Redis,
    settings: Settings,
    address: SessionAddress,
    read_context: Callable[[], SessionContext],
) -> ContextSnapshot:
    """``refresh_snapshot`` on a sync client, for the commit jobs' threads (their OV client is
    sync too: core.ov.sync_client)."""
    applied = AppliedState.from_hash(client.hgetall(session_keys(settings, address).applied))
    fetched_ms = int(time.time() * 1000)
    snapshot = snapshot_from(read_context(), address, applied)
    return stored_snapshot(snapshot, SNAPSHOT_WRITE_IF_NEWER(client, *_write(settings, snapshot, fetched_ms)))


def stored_snapshot(snapshot: ContextSnapshot, reply: Any) -> ContextSnapshot:
    """What the store left: ``snapshot`` when it was written, else the newer one it kept."""
    if int(reply[0]) == 1:
        log.debug("snapshot of %s refreshed at %s", snapshot.ov_session_id, snapshot.applied_stream_id)
        return snapshot
    log.debug("snapshot of %s at %s not stored: a newer one is", snapshot.ov_session_id, snapshot.applied_stream_id)
    return decode(reply[1], ContextSnapshot)


async def refresh_snapshot(
    redis: aioredis.Redis,
    settings: Settings,
    address: SessionAddress,
    read_context: ContextRead,
    applied: AppliedState | None = None,
) -> ContextSnapshot:
    """Store what ``read_context()`` answers as the session's snapshot unless a newer one is stored.

    ``read_context`` asks OV for the session's /context (the caller's OV client, scoped to
    the session's agent and tenant); ``applied`` is the offset the content reflects, read
    from Redis before OV is asked when not given. Returns the snapshot now stored (the newer
    one when this refresh lost).
    """
    if applied is None:
        applied = await read_applied(redis, settings, address)
    fetched_ms = int(time.time() * 1000)
    snapshot = snapshot_from(await read_context(), address, applied)
    return stored_snapshot(snapshot, await store_snapshot(redis, settings, snapshot, fetched_ms))


def parse_stored(raw: bytes | str | None) -> ContextSnapshot | None:
    """A stored snapshot's ``data`` field decoded; None when missing or unreadable."""
    if raw is None:
        return None
    try:
        return decode(raw, ContextSnapshot)
    except (ValueError, msgspec.DecodeError):
        log.warning("unreadable snapshot ignored")
        return None


async def read_snapshot(redis: aioredis.Redis, settings: Settings, address: SessionAddress) -> ContextSnapshot | None:
    """The stored snapshot, or None when there is none or it expired."""
    return parse_stored(await redis.hget(snapshot_key(settings, address), "data"))
