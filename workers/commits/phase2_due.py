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
from collections.abc import Callable
from typing import Any

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import CommitRequest
from workers.commits.looks import POLLING_LOOK_S, look_in
from workers.store.connection import text
from workers.store.keys import Keys, session_keys
from workers.store.scripts import CLAIM_STALE, DROP_EACH_IF_SCORE, SET_POLL_IF_IN_FLIGHT

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
    later: dict[str, float] | None = None,
    with_slot: Callable[[Any], Any] | None = None,
) -> None:
    """Have ``request``'s phase 2 read at ``due_at``: the slot first (what the sweep reads; not
    written again when it holds ``state`` already: ``written``; never made anew), then the due
    entry (a poller reading the entry finds the slot written). ``later``: the entry is put
    there instead, for the caller to write with the others of its batch (``settle``).
    ``with_slot(pipe)``: a write to the session's slot sent ahead of the slot's, in its round
    trip (the commit's running record: one slot is one node, in order, on a cluster too)."""
    inflight = session_keys(settings, request.address).commit_inflight
    if state != written or with_slot is not None:
        with redis.pipeline(transaction=False) as pipe:
            if with_slot is not None:
                with_slot(pipe)
            if state != written:
                SET_POLL_IF_IN_FLIGHT(pipe, [inflight], [POLLING, POLL_FIELD, msgspec.json.encode(state)])
            answers = pipe.execute()
        if state != written and not answers[-1]:
            return  # the commit ended meanwhile (a read made twice): nothing to read next
    if later is not None:
        later[inflight] = due_at
        return
    keys = Keys(settings.key_prefix)
    with redis.pipeline(transaction=False) as pipe:  # in either order: one round trip, on a cluster too
        pipe.zadd(keys.phase2_due(), {inflight: due_at})
        if state != written:  # its reads begin (or go on after a failed one): the sweep looks seldom
            look_in(pipe, settings, inflight, POLLING_LOOK_S)
        pipe.execute()


def settle(redis: redis_lib.Redis, settings: Settings, claim: float, later: dict[str, float], done: list[str]) -> None:
    """What a batch of reads claimed at ``claim`` leaves: the next reads it put (``put_poll``'s
    ``later``) and the entries it is done with (each taken out only while it has the claim's
    score: one put there again since stays), in one round trip: each was a round trip of its
    own, four or five a commit. Until then a claimed entry keeps its claim's score: one lost
    with its poller is due again when the claim lapses."""
    due = Keys(settings.key_prefix).phase2_due()
    with redis.pipeline(transaction=False) as pipe:  # one key: one node, on a cluster too
        if later:
            pipe.zadd(due, later)
        if done:
            DROP_EACH_IF_SCORE(pipe, [due], [claim, *done])
        pipe.execute()


def claim_due(redis: redis_lib.Redis, settings: Settings, *, limit: int = CLAIM_BATCH) -> tuple[list[str], float]:
    """The due reads' in-flight keys, each claimed for ``CLAIM_LEASE_S``, and the claim's score
    (``settle`` takes an entry out only while it still has it)."""
    now = time.time()
    claim = now + CLAIM_LEASE_S
    due = CLAIM_STALE(redis, [Keys(settings.key_prefix).phase2_due()], [now, claim, limit])
    return [text(k) for k in due], claim


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
