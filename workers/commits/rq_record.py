"""RQ's record of a commit worker (its ``rq:worker:<name>`` hash), written as often as something
reads it.

RQ rewrites that hash about 20 times a job (``bench/commit_scaleout.py --trace``): a heartbeat
(HSET ``last_heartbeat`` + EXPIRE) before and after each step, the state (``busy``, then
``idle`` twice: not written at all here, ``set_state``), the job's working time (always 0 in a
SimpleWorker), the success count and the total working time: a seventh of a commit's Redis
commands. What reads it: RQ's worker registry keeps a worker while the hash lives (so the
lifetime matters), ``rq info`` shows the state and counters; nothing of ovstream does
(``ovstream status`` and ``/metrics`` read ovstream's own health records, workers.store.health;
a job's own heartbeat, its execution and the registries RQ's maintenance reads are untouched).
So here the heartbeat is written when the hash's lifetime would otherwise fall short (at most
every ``HEARTBEAT_EVERY_S``), the state when it changes (``busy`` and ``idle`` never), and the
counters not at all; and RQ's check for ``rq suspend`` before each dequeue is one command. (The
steps around each job: workers.commits.rq_steps.)
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from rq.suspension import WORKERS_SUSPENDED
from rq.worker import WorkerStatus

SUSPENSION_LOOK_S = 1.0
"""How often a busy worker looks whether ``rq suspend`` was said (it takes effect within this)."""
HEARTBEAT_EVERY_S = 5.0
"""A heartbeat RQ asks for is written when the hash's lifetime left is this much short of what
it asks (RQ asks for ``worker_ttl + 60`` s, 480 by default, or a job's timeout + 60 s)."""


class LeanWorkerRecord:
    """Mixed into an RQ worker class, ahead of it (``class W(LeanWorkerRecord, SimpleWorker)``)."""

    _alive_until = 0.0
    """Monotonic time until which the hash lives, as last written."""
    _suspension_looked_at = float("-inf")
    """Monotonic time of the last look for ``rq suspend``."""

    def register_birth(self) -> None:
        super().register_birth()  # type: ignore[misc]
        self._alive_until = time.monotonic() + self.worker_ttl + 60  # type: ignore[attr-defined]

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        asked = timeout or self.worker_ttl + 60  # type: ignore[attr-defined]
        now = time.monotonic()
        if self._alive_until - now >= asked - HEARTBEAT_EVERY_S:
            return  # it lives long enough already
        lifetime = max(asked, self.worker_ttl + 60)  # type: ignore[attr-defined]
        super().heartbeat(lifetime, pipeline)  # type: ignore[misc]
        self._alive_until = now + lifetime

    def set_state(self, state: str, pipeline: Any = None) -> None:
        """The state when it changes, but not ``busy`` and ``idle``: written around every job
        (two commands a commit, one a round trip of its own) and read by nothing but ``rq
        info``, which shows a commit worker ``started`` (or ``suspended``) instead. What a
        worker does is in ovstream's own record (``ovstream status``: its queue, when last
        heard of)."""
        if state in (WorkerStatus.BUSY, WorkerStatus.IDLE):
            self._state = state  # RQ's own view (``get_state``), not written
            return
        if state != getattr(self, "_state", None):
            super().set_state(state, pipeline)  # type: ignore[misc]

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's check before each dequeue (``rq suspend``), as one EXISTS at most every
        ``SUSPENSION_LOOK_S``: RQ's own is a MULTI with a heartbeat and the EXISTS before
        every job, a round trip a commit. Suspended: RQ's own wait, as ever."""
        self.heartbeat()
        now = time.monotonic()
        if now < self._suspension_looked_at + SUSPENSION_LOOK_S:
            return
        self._suspension_looked_at = now
        if self.connection.exists(WORKERS_SUSPENDED):  # type: ignore[attr-defined]
            super().check_for_suspension(burst)  # type: ignore[misc]

    def set_current_job_working_time(self, current_job_working_time: float, pipeline: Any = None) -> None:
        """Not kept (a SimpleWorker only ever sets it to 0)."""

    def increment_successful_job_count(self, pipeline: Any = None) -> None:
        """Not kept: ovstream counts commits by outcome (workers.commits.records, /metrics)."""

    def increment_total_working_time(self, job_execution_time: timedelta, pipeline: Any) -> None:
        """Not kept (as the count)."""
