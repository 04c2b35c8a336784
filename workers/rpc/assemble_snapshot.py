"""The session snapshot assemble reads: the converted snapshot cached per version, one
OV /context read per missing snapshot (shared and shielded), the memory of sessions OV
lacks, and what an unreachable OV does to assemble. The IO below workers.rpc.assemble."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from core.assemble_plan import Passthrough, SessionBase, build_session_base, snapshot_base
from core.events import ContextSnapshot
from core.ov.client import OVError, OVUnavailable
from core.session import SessionAddress
from workers.rpc.context import Caller, Services
from workers.store.connection import REDIS_ERRORS, optional_text
from workers.store.snapshots import ZERO_ID, read_snapshot, refresh_snapshot

log = logging.getLogger(__name__)


def ov_unavailable(svc: Services, op: str, caller: Caller, exc: OVUnavailable | None) -> Passthrough:
    """Count and log an unreachable OV; a fresh failure keeps assemble off OV for a while."""
    svc.metrics.ov_unavailable.labels(op).inc()
    if exc is not None:
        svc.ov_breaker.trip()
        log.warning(
            "assemble (%s): OV unavailable for session=%s, passing through for the next %.0fs: %s",
            op,
            caller.ov_session_id,
            svc.ov_breaker.cooldown_s,
            exc,
        )
    return Passthrough("ov_unavailable")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class Snap:
    """A session's converted snapshot and the tags the overlay needs (cached per version)."""

    version: Any
    base: SessionBase
    captured_through: int
    applied_id: str
    event_ids: list[str]
    advancements: list[str]

    @property
    def capture_known(self) -> bool:
        return self.applied_id != ZERO_ID


NO_SNAPSHOT = Snap(None, build_session_base(None), 0, ZERO_ID, [], [])


async def cached_snap(svc: Services, caller: Caller) -> tuple[Snap | None, str | None]:
    """The converted snapshot of the caller's session, from the cache when its
    version is known, else read from Redis (None when there is no snapshot),
    and the event id of the session's newest published turn, in the same command."""
    session_keys = svc.session_keys(caller)
    key = session_keys.snapshot
    stream_id, fetched_ms, size, newest = await svc.versions.read(key, session_keys.last_turn)
    last_turn = optional_text(newest)
    if not size:
        return None, last_turn
    # (key, stream id, fetch time, size) names one stored snapshot: the write
    # script sets all of them at once.
    version = (key, stream_id, _int(fetched_ms), size)
    cached = svc.bases.get(version)
    if cached is not None:
        return cached, last_turn
    snapshot = await read_snapshot(svc.redis, svc.settings, caller.address())
    if snapshot is None:
        return None, last_turn
    return remember(svc, version, snapshot), last_turn


def remember(svc: Services, version: Any, snapshot: ContextSnapshot) -> Snap:
    snap = Snap(
        version,
        snapshot_base(snapshot),
        snapshot.captured_through,
        snapshot.applied_stream_id,
        snapshot.event_ids,
        snapshot.advancements,
    )
    if version is not None:
        with contextlib.suppress(ValueError):  # larger than the whole cache: answered, not kept
            svc.bases[version] = snap
    return snap


async def refresh(svc: Services, caller: Caller) -> ContextSnapshot | Passthrough:
    """Fetch OV /context for a session with no snapshot and store it.

    One read per session at a time, shared by every call that misses meanwhile, and
    shielded: a call that gives up (``assembleTimeoutS``) leaves it to finish and
    store the snapshot for the next call. A session OV does not have is remembered
    for ``missingSessionTtlS``; capture's first snapshot of it ends that sooner.
    """
    if not svc.ov_breaker.allows():
        return ov_unavailable(svc, "assemble", caller, None)
    address = caller.address()
    if svc.missing.known(address):
        return Passthrough("session_not_found")
    task = svc.refreshing.get(address)
    if task is None:
        ov, budget = svc.ov_for(caller), svc.settings.snapshot_token_budget
        read = partial(ov.get_context, address.ov_session_id, token_budget=budget)
        task = asyncio.ensure_future(refresh_snapshot(svc.redis, svc.settings, address, read))
        svc.refreshing[address] = task
        task.add_done_callback(partial(_refreshed, svc, address))
    try:
        snapshot = await asyncio.shield(task)
        svc.ov_breaker.reset()
        return snapshot
    except OVUnavailable as exc:
        return ov_unavailable(svc, "assemble", caller, exc)
    except OVError as exc:
        if exc.code == "NOT_FOUND":
            svc.missing.remember(address)
            return Passthrough("session_not_found")
        log.warning("assemble: OV /context failed for session=%s: %s", caller.ov_session_id, exc)
        return Passthrough("ov_error")
    except REDIS_ERRORS as exc:
        log.warning("assemble: snapshot not stored, Redis unavailable: %s", exc)
        return Passthrough("redis_unavailable")


def _refreshed(svc: Services, address: SessionAddress, task: asyncio.Future[ContextSnapshot]) -> None:
    svc.refreshing.pop(address, None)
    if not task.cancelled() and (exc := task.exception()) is not None:
        # said here too: every caller may have given up waiting (then nothing else says it)
        log.info(
            "assemble: the snapshot read of session=%s ended: %s: %s", address.ov_session_id, type(exc).__name__, exc
        )
