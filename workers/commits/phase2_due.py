"""Phase-2 reads as entries of one sorted set, not one RQ job each.

A commit's phase 2 is read every ``phase2PollIntervalS`` until OV says it ended. As an RQ job a
read cost about 75 Redis commands (the job's hash, the registries, the worker's bookkeeping):
four reads were 300 of a commit's 411 (bench/RESULTS.md). Here the next read is an entry of
``Keys.phase2_due`` (the session's in-flight key -> when it is due) and its state (deadline,
failed reads, task) the ``poll`` field of that in-flight slot, whose ``job`` says ``POLLING``.
Every commit worker's poller (workers.commits.poller) claims the due entries: ``CLAIM_STALE``
hands each to one of them, moving it ``CLAIM_LEASE_S`` ahead, so an entry whose poller died is
due again when the lease ends. ``workers.commits.run.read_phase2`` records each read, and puts
the next one here. A slot naming ``POLLING`` that is in no due set is
found by the sweep (workers.commits.request.commit_state) and put back.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import CommitRequest
from workers.store.connection import text
from workers.store.keys import Keys, session_keys
from workers.store.scripts import CLAIM_STALE, DROP_IF_SCORE, SET_POLL_IF_IN_FLIGHT

POLLING = "phase2-due"
"""What an in-flight slot's ``job`` names while its commit's phase 2 is read from the due set."""
POLL_FIELD = "poll"
"""In-flight hash field: the next read's state (``PollState`` JSON)."""
CLAIM_LEASE_S = 15.0
"""How long a claimed read is its poller's; unfinished by then (its worker died or stopped
mid-read), it is due again. A read OV answers slower than this may be made twice: harmless,
the first final outcome wins."""
CLAIM_BATCH = 100
"""Most reads one poller claims at a time."""


class PollState(msgspec.Struct, array_like=True, frozen=True):
    """The next read: its deadline (``phase2DeadlineS`` from phase 1), failed reads so far, and
    the phase-2 task it reads."""

    deadline_at: float
    failed_reads: int
    task_id: str


def put_poll(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    *,
    due_at: float,
    state: PollState,
    written: PollState | None = None,
) -> None:
    """Have ``request``'s phase 2 read at ``due_at``: the slot first (what the sweep reads; not
    written again when it holds ``state`` already: ``written``; never made anew), then the due
    entry (a poller reading the entry finds the slot written)."""
    inflight = session_keys(settings, request.address).commit_inflight
    if state != written and not SET_POLL_IF_IN_FLIGHT(
        redis, [inflight], [POLLING, POLL_FIELD, msgspec.json.encode(state)]
    ):
        return  # the commit ended meanwhile (a read made twice): nothing to read next
    redis.zadd(Keys(settings.key_prefix).phase2_due(), {inflight: due_at})


def claim_due(redis: redis_lib.Redis, settings: Settings, *, limit: int = CLAIM_BATCH) -> tuple[list[str], float]:
    """The due reads' in-flight keys, each claimed for ``CLAIM_LEASE_S``, and the claim's score
    (``drop`` takes an entry out only while it still has it)."""
    now = time.time()
    claim = now + CLAIM_LEASE_S
    due = CLAIM_STALE(redis, [Keys(settings.key_prefix).phase2_due()], [now, claim, limit])
    return [text(k) for k in due], claim


def drop(redis: redis_lib.Redis, settings: Settings, inflight: str, claim: float) -> None:
    """Take a claimed entry out, unless a read was put there again since (a new score)."""
    DROP_IF_SCORE(redis, [Keys(settings.key_prefix).phase2_due()], [inflight, claim])


def is_due_read(redis: redis_lib.Redis, settings: Settings, inflight: str) -> bool:
    """Whether the slot ``inflight`` has a read in the due set (claimed or not)."""
    return redis.zscore(Keys(settings.key_prefix).phase2_due(), inflight) is not None


def poll_state(raw: Any) -> PollState | None:
    """The slot's ``poll`` field, or None (absent, or not this release's shape)."""
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=PollState)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def due_reads(redis: redis_lib.Redis, settings: Settings) -> int:
    """Phase-2 reads waiting in the due set (claimed ones too)."""
    return int(redis.zcard(Keys(settings.key_prefix).phase2_due()))
