"""One phase 2 at a time per OV tenant: the tenant lock of the commit jobs.

OV 0.5.2 runs phase 2 of different sessions concurrently, and when two
memory extractions of one user overlap neither writes its memories (both
tasks complete with ``memories_extracted: {}``). So ``commit_session`` takes
the tenant's lock (``Keys.commit_tenant_lock``: a lease of workers.store.scripts
owned by the commit id, its data the holder's request) before calling OV's
commit, and recording the final outcome releases it
(``workers.commits.run.record_outcome``). A commit finding the lock held
by another commit schedules itself again after ``commit_tenant_wait_s`` instead of
blocking a worker; its request stays in flight meanwhile, so the in-flight
dedupe and compact's wait see it as usual.

The tenant is who OV sees: the API key the job acts with (the key of the
request's tenant label, wire field ``user``, in ``user_api_keys``, else ``api_key``), or in dev mode
the ``account``/``user`` headers. The lock expires after
``phase2_deadline_s + COMMIT_TENANT_LOCK_MARGIN_S`` (renewed when phase 2
starts), so a poller that died cannot hold it for ever.
"""

from __future__ import annotations

import hashlib
import logging

import redis as redis_lib

from core.config import Settings
from core.defaults import COMMIT_TENANT_LOCK_MARGIN_S
from core.events import CommitRequest, EventDecodeError, decode, encode
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.store.connection import optional_text
from workers.store.keys import Keys
from workers.store.scripts import LEASE_ACQUIRE, LEASE_RELEASE

log = logging.getLogger(__name__)


def tenant_of(settings: Settings, tenant: str | None) -> str:
    """The OV identity a commit job of tenant label ``tenant`` acts as (no secret in it)."""
    key = settings.user_api_keys.get(tenant) if tenant else None
    key = key or settings.api_key
    if key:
        return "k" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return f"dev.{settings.account}.{settings.user}"


def lock_key(settings: Settings, request: CommitRequest) -> str:
    return Keys(settings.key_prefix).commit_tenant_lock(tenant_of(settings, request.user))


def lock_ms(settings: Settings) -> int:
    """How long a held lock lives without renewal."""
    return int((settings.phase2_deadline_s + COMMIT_TENANT_LOCK_MARGIN_S) * 1000)


def hold(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Take (or renew) the tenant's lock for ``request``; False when another commit holds it.

    A holder whose outcome is already final (its process died between recording
    the outcome and releasing) is released here.
    """
    key = lock_key(settings, request)
    for _ in range(2):
        taken, held_by = LEASE_ACQUIRE(redis, [key], [request.commit_id, lock_ms(settings), encode(request)])
        if int(taken) == 1:
            return True
        try:
            other = decode(held_by, CommitRequest)
        except EventDecodeError:
            return False
        outcome = CommitRecords(redis, settings).outcome(other)
        if outcome is None or outcome.status not in FINAL_STATUSES:
            return False
        log.warning("tenant lock of %s was left by finished commit %s; taking it", key, other.commit_id)
        release(redis, settings, other)
    return False


def release(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Give the lock back if ``request`` holds it."""
    return bool(LEASE_RELEASE(redis, [lock_key(settings, request)], [request.commit_id]))


def holder(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> str | None:
    """The commit id holding the lock of ``request``'s tenant, if any."""
    return optional_text(redis.hget(lock_key(settings, request), "id"))
