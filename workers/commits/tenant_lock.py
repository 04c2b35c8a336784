"""One phase 2 at a time per OV tenant, in order: the tenant lock and its waiting line.

OV 0.5.2 runs phase 2 of different sessions concurrently, and when two
memory extractions of one user overlap neither writes its memories (both
tasks complete with ``memories_extracted: {}``). So ``commit_session`` takes
the tenant's lock (``Keys.commit_tenant_lock``: a lease owned by the commit id,
its data the holder's request) before calling OV's commit. A commit finding the
lock held joins the tenant's line (``Keys.commit_tenant_line``) and its job ends:
no job waits or polls. Recording the holder's final outcome hands the lock to the
first in line (``hand_on``), whose job is then enqueued
(``workers.commits.run.record_outcome``). A commit in line stays in flight, its
in-flight slot naming ``IN_LINE`` instead of a job, so the in-flight dedupe and
compact's wait see it as usual and the sweep leaves it alone while a holder lives.

The tenant is who OV sees: the API key the job acts with (the key of the
request's tenant label, wire field ``user``, in ``user_api_keys``, else ``api_key``), or in dev mode
the ``account``/``user`` headers. The lock expires after
``phase2_deadline_s + COMMIT_TENANT_LOCK_MARGIN_S`` (renewed when phase 2
starts), so a poller that died cannot hold it for ever; the commits in line then
count as lost, and the sweep resumes them (workers.commits.sweep).
"""

from __future__ import annotations

import hashlib
import logging

import redis as redis_lib

from core.config import Settings
from core.defaults import COMMIT_TENANT_LOCK_MARGIN_S
from core.events import CommitRequest, EventDecodeError, decode, encode
from workers.commits.queue import inflight_key
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.store.connection import optional_text
from workers.store.keys import Keys
from workers.store.scripts import LEASE_ACQUIRE, TENANT_HAND_ON, TENANT_HOLD_OR_WAIT

log = logging.getLogger(__name__)

IN_LINE = "in-tenant-line"
"""What a commit's in-flight slot names instead of a job while the commit waits in line."""


def tenant_of(settings: Settings, tenant: str | None) -> str:
    """The OV identity a commit job of tenant label ``tenant`` acts as (no secret in it)."""
    key = settings.user_api_keys.get(tenant) if tenant else None
    key = key or settings.api_key
    if key:
        return "k" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return f"dev.{settings.account}.{settings.user}"


def _keys(settings: Settings, request: CommitRequest) -> list[str]:
    tenant, keys = tenant_of(settings, request.user), Keys(settings.key_prefix)
    return [keys.commit_tenant_lock(tenant), keys.commit_tenant_line(tenant), keys.commit_tenant_line_requests(tenant)]


def lock_key(settings: Settings, request: CommitRequest) -> str:
    return _keys(settings, request)[0]


def lock_ms(settings: Settings) -> int:
    """How long a held lock lives without renewal."""
    return int((settings.phase2_deadline_s + COMMIT_TENANT_LOCK_MARGIN_S) * 1000)


def hold_or_wait(
    redis: redis_lib.Redis, settings: Settings, request: CommitRequest
) -> tuple[bool, CommitRequest | None]:
    """Take (or renew) the tenant's lock for ``request``, or join the tenant's line.

    Returns (held, handed): ``held`` when ``request`` holds the lock now. A holder whose
    outcome is already final (its process died between recording the outcome and handing
    on) is made to hand on here; ``handed`` is then the commit that got the lock, when it is
    not ``request``: its job is the caller's to enqueue.
    """
    inflight = inflight_key(settings, request)
    job = redis.hget(inflight, "job")
    # named before joining the line: a holder handing on to us may rename it at once
    redis.hset(inflight, "job", IN_LINE)
    taken, held_by = TENANT_HOLD_OR_WAIT(
        redis, _keys(settings, request), [request.commit_id, lock_ms(settings), encode(request)]
    )
    handed = None if int(taken) == 1 else _hand_on_from_finished(redis, settings, held_by)
    held = int(taken) == 1 or (handed is not None and handed.commit_id == request.commit_id)
    if held and job is not None:
        redis.hset(inflight, "job", job)
    return held, None if held else handed


def _hand_on_from_finished(redis: redis_lib.Redis, settings: Settings, held_by: bytes) -> CommitRequest | None:
    """When the holder (its request ``held_by``) has a final outcome, it hands on now: the
    commit handed the lock; None while the holder runs."""
    try:
        other = decode(held_by, CommitRequest)
    except EventDecodeError:
        return None
    outcome = CommitRecords(redis, settings).outcome(other)
    if outcome is None or outcome.status not in FINAL_STATUSES:
        return None
    log.warning(
        "tenant lock of %s was left by finished commit %s; handing it on", lock_key(settings, other), other.commit_id
    )
    return hand_on(redis, settings, other)


def renew(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Renew the lock while ``request`` holds it (or take it when free): its phase 2 runs."""
    taken, _ = LEASE_ACQUIRE(
        redis, [lock_key(settings, request)], [request.commit_id, lock_ms(settings), encode(request)]
    )
    return int(taken) == 1


def hand_on(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> CommitRequest | None:
    """``request`` is done with its tenant's lock. Held by another: ``request`` leaves the line
    (None). Else the first commit in line holds it now and is returned (its job is the
    caller's to enqueue); None when nobody waits (the lock is gone)."""
    keys, giver = _keys(settings, request), request.commit_id
    while True:
        handed = TENANT_HAND_ON(redis, keys, [giver, lock_ms(settings)])
        if not handed:
            return None
        giver, raw = optional_text(handed[0]) or "", handed[1]
        try:
            return decode(raw, CommitRequest)
        except EventDecodeError:  # nobody can run it: it hands on at once
            log.warning("tenant line of %s held an unreadable request (%s); dropped", keys[0], giver)


def in_line(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Whether ``request`` waits in its tenant's line behind a live holder (or holds the lock
    itself: it won it a moment ago, or was handed it and its job is on the way)."""
    lock, line, _ = _keys(settings, request)
    with redis.pipeline(transaction=False) as pipe:  # one slot: the tenant's
        pipe.zscore(line, request.commit_id)
        pipe.hget(lock, "id")
        queued, held_by = pipe.execute()
    return (queued is not None and held_by is not None) or optional_text(held_by) == request.commit_id


def holder(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> str | None:
    """The commit id holding the lock of ``request``'s tenant, if any."""
    return optional_text(redis.hget(lock_key(settings, request), "id"))


def line(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> list[str]:
    """The commit ids waiting in ``request``'s tenant's line, first first."""
    return [optional_text(c) or "" for c in redis.zrange(_keys(settings, request)[1], 0, -1)]
