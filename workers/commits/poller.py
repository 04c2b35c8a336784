"""Every commit worker's phase-2 reads: the due entries of the due set
(workers.commits.phase2_due), claimed in batches and read side by side, each recorded by
``workers.commits.run.read_phase2`` (a final outcome and what follows it, or the next read)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import redis as redis_lib

from core.config import Settings
from core.events import CommitRequest, EventDecodeError, decode
from workers import logs
from workers.commits.context import JobContext, context_for, lane
from workers.commits.phase2_due import (
    CLAIM_BATCH,
    POLL_FIELD,
    POLLING,
    PollState,
    claim_due,
    poll_state,
    settle,
)
from workers.commits.run import patiently, read_phase2
from workers.store.connection import REDIS_ERRORS, optional_text
from workers.store.ticking import TickingThread

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_TICK_S = 0.2
"""How often a worker's poller looks for due reads (reads are ``phase2PollIntervalS`` apart, 0.8 s by default)."""
POLL_THREADS = 8
"""Reads one worker has with OV at once."""
STOP_WAIT_S = 5.0
"""How long a stopping worker waits for the reads it claimed (the rest are due again when
their claim lapses: ``CLAIM_LEASE_S``)."""


def run_due_polls(redis: redis_lib.Redis, settings: Settings, ctx: JobContext, threads: int = 1) -> int:
    """Claim the due reads and make them (side by side in up to ``threads``); how many were
    claimed. Redis trouble raises (the claims lapse)."""
    inflights, claim = claim_due(redis, settings)
    if not inflights:
        return 0
    with redis.pipeline(transaction=False) as pipe:
        for inflight in inflights:
            pipe.hmget(inflight, "req", "job", POLL_FIELD)
        slots = pipe.execute()
    reads: list[tuple[str, CommitRequest, PollState]] = []
    done: list[str] = []  # entries to drop, and the next reads, written together (settle)
    later: dict[str, float] = {}
    for inflight, (raw_request, job, raw_state) in zip(inflights, slots):
        found = _read_of(raw_request, job, raw_state)
        if found is None:  # the commit ended, or another step holds its slot now
            done.append(inflight)
        else:
            reads.append((inflight, *found))

    def one(read: tuple[str, CommitRequest, PollState]) -> None:
        inflight, request, state = read
        with logs.fields(session=request.ov_session_id, commit_id=request.commit_id):
            # Redis away mid-way is waited out here: a final record made before it went would
            # leave no slot for a later claim to find, and what follows it unscheduled
            if patiently(request, lambda: read_phase2(redis, ctx, request, state, later=later)) is not None:
                done.append(inflight)  # final: no next read was put

    side_by_side(one, reads, threads)
    settle(redis, settings, claim, later, done)
    return len(inflights)


def side_by_side(work: Callable[[T], None], items: list[T], threads: int) -> None:
    """``work(item)`` for each item, in up to ``threads`` daemon threads (a stopping worker's
    process never waits for a read that waits out Redis: its claim lapses); the first error raises."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            work(item)
        return
    errors: list[BaseException] = []

    def run(n: int, share: list[T]) -> None:
        try:
            with lane(n):  # its own OV pool (workers.commits.context.OV_LANES: why)
                for item in share:
                    work(item)
        except BaseException as exc:  # raised in the caller's thread below
            errors.append(exc)

    shares = [items[i::threads] for i in range(min(threads, len(items)))]
    started = [
        threading.Thread(target=run, args=(n, share), name="ovstream-phase2-read", daemon=True)
        for n, share in enumerate(shares, start=1)  # lane 0: the commit jobs'
    ]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    if errors:
        raise errors[0]


def _read_of(
    raw_request: bytes | None, job: bytes | None, raw_state: bytes | None
) -> tuple[CommitRequest, PollState] | None:
    """The slot's commit and its read's state, while the slot is at a read."""
    if raw_request is None or optional_text(job) != POLLING:
        return None
    state = poll_state(raw_state)
    try:
        request = decode(raw_request, CommitRequest)
    except EventDecodeError:
        return None
    return (request, state) if state is not None else None


class PhasePoller(TickingThread):
    """A commit worker's reads of the due phase 2s, every ``POLL_TICK_S`` until ``stop``; Redis
    trouble is said once and waited out (the claims lapse, another worker's poller takes them)."""

    def __init__(self, redis: redis_lib.Redis, settings: Settings) -> None:
        super().__init__("ovstream-phase2-poller", POLL_TICK_S, away="phase-2 reads wait", back="phase-2 reads go on")
        self._redis, self._settings = redis, settings
        self._ctx: JobContext | None = None

    def tick(self) -> None:
        ctx = self._ctx = self._ctx or context_for(self._settings.key_prefix)
        try:
            while run_due_polls(self._redis, self._settings, ctx, POLL_THREADS) >= CLAIM_BATCH and not self.stopping:
                pass  # more are due: read them at once
        except REDIS_ERRORS:
            raise
        except Exception:  # a bug in one batch must not end the worker's reads
            log.exception("phase-2 reads: a batch failed; its claims lapse and are read again")

    def stop(self) -> None:
        """Stop after the batch being read (up to ``STOP_WAIT_S``)."""
        super().stop()
        self.join(timeout=STOP_WAIT_S)
