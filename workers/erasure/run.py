"""Erase a user, an agent or a session everywhere, with a receipt (core.erasure).

Steps, each idempotent, so a run killed anywhere and run again completes:

1. the tombstone (``Keys.erased_scopes``): from now until ``eraseTombstoneTtlS`` capture drops
   the scope's turns unapplied (workers.capture.erased); then a pause (``eraseSettleS``) for capture
   to have seen it and finished a round begun before;
2. a pass: the scope's commit jobs cancelled, its phase 2s in OV stopped, its OV sessions and
   memories removed (workers.erasure.ov_side), then what Redis keeps of it
   (workers.erasure.redis_side);
3. after another pause, the same pass again: whatever a write begun before the tombstone left.

What each pass removed is added to the erasure's record (``Keys.erasure``, by the scope's
digest), so a rerun's receipt counts the run before it too; the receipt and an audit entry
(``Keys.erasures``: when, the kind and digest of the scope, who asked, the counts; no user id,
no content) close it. ``dry_run`` counts what would go and changes nothing (no tombstone).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx
import redis as redis_lib

from core.config import Settings
from core.erasure import ErasureScope, scope_digest
from core.ov.client import OVClient
from workers.erasure import redis_side
from workers.erasure.ov_side import erase_in_ov
from workers.store.connection import connect, text
from workers.store.keys import Keys

log = logging.getLogger(__name__)

T = TypeVar("T")
Run = Callable[[Callable[[], Awaitable[T]]], T]

AUDIT_KEPT = 10_000
"""Approximate length of the audit stream (``Keys.erasures``)."""
PASSES = 2


@dataclass
class Receipt:
    """What an erasure removed (or, a dry run, would remove), per store."""

    scope: str
    kind: str
    digest: str
    dry_run: bool
    removed: dict[str, int] = field(default_factory=dict)
    """``ov_sessions``, ``ov_memory_files``, ``redis_keys``, ``redis_members``, ``turns``,
    ``dead_letters``, ``commit_outcomes``, ``repairs_listed``, ``commit_jobs``."""
    started_at: float = 0.0
    finished_at: float = 0.0
    runs: int = 1
    """Runs it took (a crash, then a rerun: 2)."""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.removed.items())) or "nothing"
        said = [f"erase {self.scope}: {verb} {counts}"]
        if not self.dry_run:
            said.append(
                f"tombstone {self.digest}: turns of it are dropped unapplied until it expires; "
                f"{self.runs} run(s), {self.finished_at - self.started_at:.1f} s"
            )
        return said


def erase(
    redis: redis_lib.Redis,
    settings: Settings,
    scope: ErasureScope,
    ov: OVClient,
    run: Run[Any],
    *,
    dry_run: bool = False,
    requested_by: str = "cli",
    settle_s: float | None = None,
    fault: Callable[[str], None] | None = None,
) -> Receipt:
    """Erase ``scope`` (see the module); ``run`` runs a coroutine on ``ov``'s loop."""
    keys, digest = Keys(settings.key_prefix), scope_digest(settings.key_prefix, scope)
    settle_s = settings.erase_settle_s if settle_s is None else settle_s
    fault = fault or (lambda step: None)
    if dry_run:
        found = redis_side.find(redis, settings, scope)
        counted = run(partial(_ov_pass, ov, scope, found, settings, dry_run=True))
        counted.update(redis_side.remove(redis, settings, scope, found, dry_run=True))
        now = time.time()
        return Receipt(scope.describe(), scope.kind, digest, True, dict(counted), now, now)
    record = keys.erasure(digest)
    ttl = settings.erase_tombstone_ttl_s
    started = float(text(redis.hget(record, "started_at") or b"0")) or time.time()
    runs = redis.hincrby(record, "runs", 1)
    redis.hset(record, mapping={"started_at": started, "state": "running", "kind": scope.kind})
    redis.expire(record, ttl)
    _tombstone(redis, settings, digest, ttl)
    log.info("erase %s: tombstone %s written; dropping its turns from now on", scope.kind, digest)
    time.sleep(settle_s)
    for step in range(PASSES):
        fault(f"pass{step}")
        found = redis_side.find(redis, settings, scope)
        _count(redis, record, run(partial(_ov_pass, ov, scope, found, settings, dry_run=False)))
        fault(f"pass{step}-ov-done")
        _count(redis, record, redis_side.remove(redis, settings, scope, found, dry_run=False))
        if step + 1 < PASSES:
            time.sleep(settle_s)
    totals = {
        text(k)[len("removed:") :]: int(v) for k, v in redis.hgetall(record).items() if text(k).startswith("removed:")
    }
    receipt = Receipt(scope.describe(), scope.kind, digest, False, totals, started, time.time(), int(runs))
    redis.hset(record, "state", "done")
    redis.xadd(
        keys.erasures(),
        {"at": receipt.finished_at, "kind": scope.kind, "digest": digest, "by": requested_by, "removed": str(totals)},
        maxlen=AUDIT_KEPT,
        approximate=True,
    )
    log.info("erase %s %s: done: %s", scope.kind, digest, totals)
    return receipt


async def _ov_pass(
    ov: OVClient, scope: ErasureScope, found: redis_side.Found, settings: Settings, *, dry_run: bool
) -> Counter[str]:
    return await erase_in_ov(
        ov, scope, found.session_ids, found.repair_sessions, dry_run=dry_run, task_wait_s=settings.phase2_deadline_s
    )


def _count(redis: redis_lib.Redis, record: str, removed: Counter[str]) -> None:
    """Add a step's counts to the erasure's record as soon as the step is done (a crash after it
    keeps them: a rerun finds those things gone and counts nothing for them)."""
    for what, count in removed.items():
        if count:
            redis.hincrby(record, f"removed:{what}", count)


def _tombstone(redis: redis_lib.Redis, settings: Settings, digest: str, ttl_s: int) -> None:
    """Stand the scope's tombstone (and drop the ones past their time)."""
    keys, now = Keys(settings.key_prefix), time.time()
    stale = [k for k, until in redis.hgetall(keys.erased_scopes()).items() if float(until) < now]
    if stale:
        redis.hdel(keys.erased_scopes(), *stale)
    redis.hset(keys.erased_scopes(), digest, now + ttl_s)


def tenant_of(settings: Settings, user: str) -> tuple[str | None, str | None]:
    """(tenant label, the OV key acting as it) for a ``--user``; ValueError when it is neither a
    tenant of ``userApiKeys`` nor the deployment's own user."""
    if user in settings.user_api_keys:
        return user, settings.user_api_keys[user]
    if user == settings.user:
        return None, settings.api_key
    known = [*sorted(settings.user_api_keys), settings.user]
    raise ValueError(f"no user {user!r} here (tenants: {', '.join(known)})")


def erase_with(
    settings: Settings,
    scope: ErasureScope,
    api_key: str | None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    **options: Any,
) -> Any:
    """Run an erasure with an OV client acting as ``api_key`` (None: dev mode), on a loop of its own."""
    loop = asyncio.new_event_loop()
    base = OVClient.from_settings(settings, transport=transport)
    ov = base.scoped(api_key=api_key)  # no actor peer: OV hides the other peers (and their overview) from one

    def run(make: Callable[[], Awaitable[Any]]) -> Any:
        return loop.run_until_complete(make())

    try:
        return erase(connect(settings), settings, scope, ov, run, **options)
    finally:
        loop.run_until_complete(base.aclose())
        loop.close()
