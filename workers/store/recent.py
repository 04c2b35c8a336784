"""The sessions assemble answered most recently, per tenant: the console's list of sessions,
and how its inspector finds a session named by its id alone, whatever agent it belongs to.

One sorted set per tenant (``Keys.recent_sessions``): member the session's address and key,
score when assemble last kept a trace of it (workers.rpc.traces). Each keeps its newest
``RECENT_PER_TENANT`` and lives as the traces do (``consoleTraceTtlS``): an idle tenant's
list goes with its sessions' traces. A session no longer listed is still found by its id:
``find_sessions`` then looks for its keys (a SCAN of its shard's families).
"""

from __future__ import annotations

from typing import Any

import msgspec
import redis as redis_lib
import redis.asyncio as aioredis

from core.config import Settings
from core.session import SessionAddress, shard_of, tenant_and_agent
from workers.store.connection import text
from workers.store.keys import Keys

RECENT_PER_TENANT = 100
"""Sessions each tenant's list keeps (a member is ~150 bytes)."""
NO_TENANT = "-"
"""The default tenant's name in ``Keys.recent_tenants``."""
FOUND_BY = ("assembled", "assembled-recall", "applied", "commits")
"""The key families whose scope tells which agents and tenants a session id has."""


class RecentSession(msgspec.Struct, frozen=True, kw_only=True):
    ov_session_id: str
    agent_id: str
    tenant: str | None = None
    session_key: str | None = None
    at: float = 0.0
    """When assemble last answered it (0: found by its keys, not listed)."""

    @property
    def address(self) -> SessionAddress:
        return SessionAddress(self.ov_session_id, self.agent_id, self.tenant)


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(RecentSession).decode


async def note_session(
    redis: aioredis.Redis, keys: Keys, address: SessionAddress, session_key: str | None, at: float, ttl_s: int
) -> None:
    """List the session as answered at ``at`` (the oldest beyond the list's size or lifetime go)."""
    key = keys.recent_sessions(address.tenant)
    member = _encode(RecentSession(**_fields(address), session_key=session_key))
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zadd(key, {member: at})
        pipe.zremrangebyrank(key, 0, -RECENT_PER_TENANT - 1)
        pipe.zremrangebyscore(key, "-inf", at - ttl_s)
        pipe.expire(key, ttl_s)
        pipe.sadd(keys.recent_tenants(), address.tenant or NO_TENANT)
        pipe.expire(keys.recent_tenants(), ttl_s)
        await pipe.execute()


def _fields(address: SessionAddress) -> dict[str, Any]:
    return {"ov_session_id": address.ov_session_id, "agent_id": address.agent_id, "tenant": address.tenant}


def read_recent(
    client: redis_lib.Redis, settings: Settings, tenants: frozenset[str | None] | None, *, limit: int = 50
) -> list[RecentSession]:
    """The sessions answered most recently, newest first, of ``tenants`` (None: every tenant)."""
    keys = Keys(settings.key_prefix)
    if tenants is None:  # every tenant that had a list (an expired one's name reads as empty)
        tenants = frozenset(None if t == NO_TENANT else t for t in map(text, client.smembers(keys.recent_tenants())))
    names = [keys.recent_sessions(t) for t in tenants]
    found = []
    for name in names:
        members: list[tuple[bytes, float]] = client.zrevrange(name, 0, limit - 1, withscores=True)  # type: ignore[assignment]
        for member, score in members:
            try:
                entry = _decode(member)
            except msgspec.DecodeError:
                continue  # written by another release: not ours to read
            found.append(msgspec.structs.replace(entry, at=float(score)))
    return sorted(found, key=lambda e: -e.at)[:limit]


def find_sessions(
    client: redis_lib.Redis, settings: Settings, ov_session_id: str, tenants: frozenset[str | None] | None
) -> list[RecentSession]:
    """Every agent and tenant (of ``tenants``; None: any) that has the OV session
    ``ov_session_id``: the listed ones first (newest first, with their keys), then those only
    its keys show."""
    listed = [e for e in read_recent(client, settings, tenants, limit=10_000) if e.ov_session_id == ov_session_id]
    seen = {e.address for e in listed}
    for address in addresses_by_keys(client, settings, ov_session_id, FOUND_BY):
        if address not in seen and (tenants is None or address.tenant in tenants):
            seen.add(address)
            listed.append(RecentSession(**_fields(address)))
    return listed


def addresses_by_keys(
    client: redis_lib.Redis, settings: Settings, ov_session_id: str, kinds: tuple[str, ...]
) -> list[SessionAddress]:
    """Every agent and tenant with a key of one of ``kinds`` for the OV session (a SCAN)."""
    keys, shard = Keys(settings.key_prefix), shard_of(ov_session_id, settings.shards)
    found: dict[SessionAddress, None] = {}
    for kind in kinds:
        for raw in client.scan_iter(match=keys.session_glob(kind, shard, ov_session_id), count=1000):
            tenant, agent_id = tenant_and_agent(keys.scope_in(kind, text(raw), shard, ov_session_id))
            found[SessionAddress(ov_session_id, agent_id, tenant)] = None
    return list(found)
