"""Subagent lineage: which session spawned which, how, and what a fork started from.

OpenClaw spawns subagents (``sessions_spawn``) and tells the context engine before a child
starts (``prepareSubagentSpawn``) and when its run ended (``onSubagentEnded``). ovstream
keeps, per child session, one hash (``Keys.lineage``): the parent's OV session and keys, the
context mode (``isolated`` or ``fork``), when it was prepared and how it ended; for a fork
also the parent's snapshot as it was at the spawn (``base``) and how many of the host's
messages the fork copied into the child's transcript (``fork_at``, learned from the child's
first assemble). Nothing of the parent is written to the child's OV session: assemble builds
a fork's context from that base (core.fork). The hash lives ``sessionStateTtlS`` from its
last change, as the rest of a session's state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import Redis as SyncRedis

from core.config import Settings
from core.events import ContextSnapshot, EventDecodeError, decode
from core.ids import ov_session_id
from core.session import SessionAddress
from workers.store.connection import optional_text, text
from workers.store.keys import Keys

FORK = "fork"
ISOLATED = "isolated"
CONTEXT_MODES = (ISOLATED, FORK)


@dataclass(frozen=True, slots=True)
class Lineage:
    """One child session's record."""

    parent: str
    """The parent's OV session id."""
    child: str
    """The child's own OV session id ("" until the host named its sessionId)."""
    parent_key: str
    child_key: str
    mode: str
    prepared_at: float
    fork_at: int | None = None
    """Host messages the fork copied into the child's transcript (its first assemble's count)."""
    ended_at: float | None = None
    end_reason: str | None = None
    base: ContextSnapshot | None = None
    """A fork's parent snapshot at the spawn (None: isolated, or the parent had none)."""
    copied: bytes | None = None
    """A fork's copied messages its parent's snapshot did not reflect (the spawning turn,
    typically), as the child's first assemble had them: JSON, a list of host messages. Kept,
    not sliced from each request by position: the host passes back what assemble answered."""


def lineage_address(session_key: str | None, session: SessionAddress) -> SessionAddress:
    """Where the lineage of ``session`` is kept: under its session key (the OV session id the
    key alone names, core.ids), else its own address. The host may name a child's sessionId
    only once it runs (an isolated spawn is prepared without one); the key is what every hook
    and the child's own calls share. A key of blanks names nothing (core.ids): its own address."""
    if not session_key or not session_key.strip():
        return session
    return SessionAddress(ov_session_id("", session_key), session.agent_id, session.tenant)


def _key(settings: Settings, where: SessionAddress) -> str:
    return Keys(settings.key_prefix).session(where, settings.shards).lineage


async def record_spawn(
    redis: aioredis.Redis,
    settings: Settings,
    where: SessionAddress,
    *,
    child: str,
    parent: str,
    parent_key: str,
    child_key: str,
    mode: str,
    base: bytes | None,
) -> None:
    """The child's record as prepared (a new spawn of the same child replaces it)."""
    fields: dict[str, str | bytes] = {
        "child": child,
        "parent": parent,
        "parent_key": parent_key,
        "child_key": child_key,
        "mode": mode,
        "prepared_at": repr(time.time()),
    }
    if base is not None:
        fields["base"] = base
    key = _key(settings, where)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
        pipe.expire(key, settings.session_state_ttl_s)
        await pipe.execute()
    await _refer(redis, settings, child, key)


async def _refer(redis: aioredis.Redis, settings: Settings, child: str, key: str) -> None:
    """Let the child's OV session id find its lineage (``Keys.lineage_ref``)."""
    if child:
        await redis.set(Keys(settings.key_prefix).lineage_ref(child), key, ex=settings.session_state_ttl_s)


def read_lineage_by_id(redis: SyncRedis, settings: Settings, ov_session_id: str) -> Lineage | None:
    """The lineage of the subagent session ``ov_session_id`` found by its id alone (an operator
    without its session key); None when none was recorded with its id."""
    key = redis.get(Keys(settings.key_prefix).lineage_ref(ov_session_id))
    return lineage_of(redis.hgetall(text(key))) if key else None


async def drop_spawn(redis: aioredis.Redis, settings: Settings, where: SessionAddress) -> bool:
    """Forget a spawn that failed after it was prepared (the host's rollback); True if known."""
    return bool(await redis.delete(_key(settings, where)))


async def record_end(
    redis: aioredis.Redis, settings: Settings, where: SessionAddress, reason: str, *, child: str = ""
) -> bool:
    """Note how the child's run ended (and its OV session, when known by now); False when no
    spawn of it is known."""
    key = _key(settings, where)
    if not await redis.exists(key):
        return False
    fields: dict[str, str | bytes] = {"ended_at": repr(time.time()), "end_reason": reason}
    if child:
        fields["child"] = child
    await redis.hset(key, mapping=fields)  # type: ignore[arg-type]
    await redis.expire(key, settings.session_state_ttl_s)
    await _refer(redis, settings, child, key)
    return True


COPIED_MAX_BYTES = 1 << 20
"""Most bytes of a fork's copied messages kept (the newest that fit: the spawning turn last)."""


async def fork_point(
    redis: aioredis.Redis, settings: Settings, where: SessionAddress, count: int, copied: list[bytes]
) -> tuple[int, bytes]:
    """The fork's copied message count and copied messages (JSON): ``count`` and ``copied``
    (each message's JSON, the newest within ``COPIED_MAX_BYTES``) if none are known yet (the
    first assemble's), else the ones known."""
    kept: list[bytes] = []
    size = 2
    for message in reversed(copied):
        size += len(message) + 1
        if size > COPIED_MAX_BYTES:
            break
        kept.append(message)
    key = _key(settings, where)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(key, "fork_at", count)
        pipe.hsetnx(key, "copied", b"[" + b",".join(reversed(kept)) + b"]")
        pipe.hmget(key, "fork_at", "copied")
        *_, (fork_at, known) = await pipe.execute()
    return int(fork_at or count), known or b"[]"


async def read_lineage(redis: aioredis.Redis, settings: Settings, where: SessionAddress) -> Lineage | None:
    """The child's record, None when the session is no known subagent (or it expired)."""
    raw = await redis.hgetall(_key(settings, where))
    return lineage_of(raw) if raw else None


def lineage_of(raw: Mapping[Any, Any]) -> Lineage | None:
    """A record from its hash; None when it lacks what every record has."""
    fields = {text(k): v for k, v in raw.items()}
    if "parent" not in fields or "mode" not in fields:
        return None
    fork_at, ended_at = optional_text(fields.get("fork_at")), optional_text(fields.get("ended_at"))
    base = fields.get("base")
    return Lineage(
        parent=text(fields["parent"]),
        child=text(fields.get("child")),
        parent_key=text(fields.get("parent_key")),
        child_key=text(fields.get("child_key")),
        mode=text(fields["mode"]),
        prepared_at=float(text(fields.get("prepared_at")) or 0),
        fork_at=int(fork_at) if fork_at else None,
        ended_at=float(ended_at) if ended_at else None,
        end_reason=optional_text(fields.get("end_reason")),
        base=_snapshot(base),
        copied=fields.get("copied"),
    )


def _snapshot(raw: bytes | None) -> ContextSnapshot | None:
    try:
        return decode(raw, ContextSnapshot) if raw else None
    except EventDecodeError:  # written by this code; unreadable means damaged: no base
        return None
