"""What every RPC handler shares: the app's services and the caller's identity.

``Services`` is built once per app (Redis client, one OV client whose pool all
requests share, metrics, caches). ``Caller`` is resolved per request from the
body and the headers: OV session id, agent id, API key and the tenant label
that scopes Redis keys, so two agents or two users never read each other's
snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis.asyncio as aioredis
from cachetools import LRUCache
from redis import Redis as SyncRedis

from core.config import Settings
from core.events import ContextSnapshot
from core.ids import is_bypassed, ov_session_id, resolve_agent_id
from core.ov.client import OVClient, OVError, OVUnavailable
from core.session import SessionAddress, tenant_for_api_key
from workers.rpc.metrics import RpcMetrics
from workers.rpc.traces import TraceRecorder
from workers.store.keys import Keys, SessionKeys
from workers.store.versions import SnapshotVersions

log = logging.getLogger(__name__)

API_KEY_HEADER = "X-OpenViking-API-Key"


class RpcError(Exception):
    """An answer other than 200, with a code and a message for the caller."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def rpc_error_for(exc: OVError) -> RpcError:
    """OV trouble as the caller's error: 503 when OV is unreachable, OV's own 4xx
    kept (its 401 as 403), anything else OV's fault (502), never a 500."""
    if isinstance(exc, OVUnavailable):
        return RpcError(503, "ov_unavailable", f"OpenViking is unreachable: {exc.message}")
    if exc.status == 401:  # OV refused the key: a 401 of ours would say the RPC token is wrong
        return RpcError(403, exc.code, f"OpenViking refused the key this request acts with: {exc.message or exc.code}")
    status = exc.status if 400 <= exc.status < 500 else 502
    return RpcError(status, exc.code, exc.message or exc.code)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (None without one)."""
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def api_key_from_headers(headers: Mapping[str, str], *, bearer: bool = True) -> str | None:
    """The caller's OV key: ``X-OpenViking-API-Key``, else (``bearer``: when the RPC has no
    tokens of its own) ``Authorization: Bearer``."""
    key = (headers.get(API_KEY_HEADER) or "").strip()
    if key or not bearer:
        return key or None
    return bearer_token(headers)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts for."""

    session_id: str | None
    session_key: str | None
    ov_session_id: str | None
    """None when the request names no session (tools only)."""
    agent_id: str
    api_key: str | None
    tenant: str | None
    """Tenant label of the Redis scope (see tenant_for_api_key)."""
    bypassed: bool

    def require_session(self) -> str:
        if self.ov_session_id is None:
            raise RpcError(400, "no_session", "this call needs sessionId or sessionKey", "sessionId")
        return self.ov_session_id

    def address(self, ov_session_id: str | None = None) -> SessionAddress:
        """The caller's session (or ``ov_session_id`` of the same agent and tenant)."""
        return SessionAddress(ov_session_id or self.require_session(), self.agent_id, self.tenant)


def resolve_caller(
    settings: Settings,
    *,
    session_id: str | None,
    session_key: str | None,
    runtime_context: Mapping[str, Any] | None,
    api_key: str | None,
    session_required: bool = False,
) -> Caller:
    """Identity per the seed: the sessionKey comes from the body, else runtimeContext;
    the agent from the sessionKey, else runtimeContext.agentId, else "main"."""
    runtime = runtime_context or {}
    key = _text(session_key) or _text(runtime.get("sessionKey"))
    sid = session_id or None  # untrimmed: ov_session_id trims it (and hashes an all-blank one)
    ov_sid = None
    if session_required and not (sid or key):
        raise RpcError(400, "invalid_session", "sessionId is empty", "sessionId")
    if sid or key:
        try:
            ov_sid = ov_session_id(sid or "", key)
        except ValueError as exc:
            raise RpcError(400, "invalid_session", str(exc), "sessionId") from exc
    return Caller(
        session_id=sid,
        session_key=key,
        ov_session_id=ov_sid,
        agent_id=resolve_agent_id(key, _text(runtime.get("agentId")), settings.agent_prefix),
        api_key=api_key,
        tenant=tenant_for_api_key(settings, api_key),
        bypassed=is_bypassed(settings.bypass_session_patterns, sid, key),
    )


class OVBreaker:
    """Skips OV on assemble's hot path for a while after OV was found unreachable.

    Reaching a down OV costs the client's retries (over a second); assemble
    would pay that on every call that needs OV and pass through anyway. After
    one such failure, calls in the next ``cooldown_s`` pass through at once.
    """

    def __init__(self, cooldown_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._open_until = 0.0

    def allows(self) -> bool:
        return self._clock() >= self._open_until

    def trip(self) -> None:
        self._open_until = self._clock() + self.cooldown_s

    def reset(self) -> None:
        self._open_until = 0.0


class MissingSessions:
    """Sessions OV just said it does not have, each remembered for ``ttl_s`` (bounded)."""

    def __init__(self, ttl_s: float, capacity: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._until: LRUCache[Hashable, float] = LRUCache(capacity)

    def remember(self, key: Hashable) -> None:
        if self.ttl_s > 0:
            self._until[key] = self._clock() + self.ttl_s

    def known(self, key: Hashable) -> bool:
        until = self._until.get(key)
        return until is not None and self._clock() < until


BASE_BYTES_PER_STORED_BYTE = 4
"""A converted base takes about this many bytes of memory per byte of its snapshot in Redis
(Python objects for every message and block; measured ~3x on 60-message sessions)."""
BASE_CACHE_SHARE = 0.70
RESULT_CACHE_SHARE = 0.20
"""Of ``rpcCacheBytes``, the converted bases' part and the finished answers'; the recall
blocks of recent turns and the snapshot versions Redis tracks share the rest."""


def base_bytes(snap: Any) -> int:
    """What a converted base costs in memory, from its version's stored size (``cached_snap``)."""
    version = getattr(snap, "version", None)
    stored = version[3] if isinstance(version, tuple) and len(version) > 3 else 0
    return BASE_BYTES_PER_STORED_BYTE * int(stored or 0) + 1024


def answer_bytes(answer: Any) -> int:
    """What a finished answer costs in memory: its encoded body, and the rest of the object."""
    body = getattr(answer, "body", b"")
    return len(body) + 2048


def recall_bytes(kept: tuple[float, str]) -> int:
    """What one turn's recall block costs in memory: its text (up to 4 bytes a character) and
    the entry around it, its key (a turn key of bounded length) among it."""
    return 4 * len(kept[1]) + 512


CALLER_CACHE_SIZE = 4096
"""Identities resolved to callers kept in process (``Callers``): ids bounded by
``SESSION_ID_MAX``, so a few KB each at most, ~10 MiB in all."""


class Callers:
    """``resolve_caller`` remembered per identity.

    The host sends the same few identities on every call; resolving one (trimming, a
    session key's hash, the agent's sanitising, a tenant's hash) costs about as much as
    assemble's own answer from a snapshot. The result depends only on the fields in the
    key and on the settings, which are fixed per app. Refusals (a 400) are not kept.
    """

    def __init__(self, settings: Settings, capacity: int = CALLER_CACHE_SIZE) -> None:
        self.settings = settings
        self._known: LRUCache[tuple[Any, ...], Caller] = LRUCache(capacity)

    def of(self, body: object, api_key: str | None, *, session_required: bool) -> Caller:
        """The caller of a request whose ``body`` has the identity fields (``sessionId``,
        ``sessionKey``, ``runtimeContext``), acting with ``api_key``."""
        session_id, session_key = getattr(body, "sessionId", None), getattr(body, "sessionKey", None)
        runtime = getattr(body, "runtimeContext", None) or {}
        key = (session_id, session_key, runtime.get("sessionKey"), runtime.get("agentId"), api_key, session_required)
        try:
            known = self._known.get(key)
        except TypeError:  # an unhashable field (JSON the caller nested there): resolved, not kept
            known, keep = None, False
        else:
            keep = True
        if known is not None:
            return known
        caller = resolve_caller(
            self.settings,
            session_id=session_id,
            session_key=session_key,
            runtime_context=runtime,
            api_key=api_key,
            session_required=session_required,
        )
        if keep:
            self._known[key] = caller
        return caller


@dataclass
class Services:
    settings: Settings
    redis: aioredis.Redis
    """The RPC's Redis: asyncio, every call on the event loop."""
    commit_redis: SyncRedis
    """Sync, for the RQ commit queue (RQ is sync): used from threads only (``asyncio.to_thread``)."""
    ov: OVClient
    metrics: RpcMetrics
    ov_transport: httpx.AsyncBaseTransport | None = None
    """What replaces OV's connections (tests, the embedded mode), for a client on another loop."""
    direct: bool = False
    """Serve the main call by fetching OV /context every time (the reference
    plugin's way), bypassing snapshots; for the benchmark's comparison."""
    ov_breaker: OVBreaker = field(default_factory=OVBreaker)
    bases: LRUCache[Any, Any] = field(init=False)
    """Converted session bases, per (session, agent, tenant) version: bounded by bytes."""
    results: LRUCache[Any, Any] = field(init=False)
    """Finished main-call answers, per snapshot version and budget: bounded by bytes."""
    recalls: LRUCache[str, tuple[float, str]] = field(init=False)
    """turn key -> (expiry on the monotonic clock, block): the turn's settled block (bytes-bounded)."""
    refreshing: dict[SessionAddress, asyncio.Future[ContextSnapshot]] = field(default_factory=dict)
    """Snapshot reads from OV in flight, one per session (workers.rpc.assemble._refresh)."""
    missing: MissingSessions = field(init=False)
    versions: SnapshotVersions = field(init=False)
    """Snapshot versions kept while Redis tracks them (started with the app: ``versions.start()``)."""

    keys: Keys = field(init=False)
    callers: Callers = field(init=False)
    traces: TraceRecorder = field(init=False)
    """What the console's session inspector shows: each session's last answer and recall."""

    def __post_init__(self) -> None:
        budget = self.settings.rpc_cache_bytes
        self.bases = LRUCache(int(budget * BASE_CACHE_SHARE), getsizeof=base_bytes)
        self.results = LRUCache(int(budget * RESULT_CACHE_SHARE), getsizeof=answer_bytes)
        rest = budget - int(budget * BASE_CACHE_SHARE) - int(budget * RESULT_CACHE_SHARE)
        self.recalls = LRUCache(rest // 2, getsizeof=recall_bytes)
        self.callers = Callers(self.settings)
        self.missing = MissingSessions(self.settings.missing_session_ttl_s)
        self.versions = SnapshotVersions(self.redis, self.settings, max_bytes=rest - rest // 2)
        self.keys = Keys(self.settings.key_prefix)
        self.traces = TraceRecorder(self.redis, self.settings)

    def ov_for(self, caller: Caller) -> OVClient:
        """OV client acting as the caller: their key (if any) and their agent as peer."""
        return self.ov.scoped(peer=caller.agent_id, api_key=caller.api_key)

    def session_keys(self, caller: Caller) -> SessionKeys:
        """The Redis keys of the caller's session."""
        return self.keys.session(caller.address(), self.settings.shards)
