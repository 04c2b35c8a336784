"""Due commit-chain jobs onto the queue, moved by every worker: no lock to orphan.

Phase-2 polls and timeout rechecks are ``enqueue_in`` jobs: they sit in
RQ's ScheduledJobRegistry until something enqueues them. RQ's own scheduler does it in one
worker at a time behind a lock that outlives a SIGKILLed worker by up to 61 s, and the
restarted worker tries for the lock again only in its maintenance run (600 s by default);
a Redis restart kills the scheduler thread outright. Commits stalled for minutes either
way. Here every worker moves due jobs itself, twice a second, and a Lua script hands each
due job to exactly one of them (``workers.store.scripts.CLAIM_DUE_JOBS``), so there is
nothing to take over: a restarted worker, or any other one, moves them on its next tick.
"""

from __future__ import annotations

import logging
import time

import redis as redis_lib
from rq.job import Job

from core.config import Settings
from workers.commits import sweep as commit_sweep
from workers.commits.lines import line_of_job
from workers.commits.looks import SWEEP_INTERVAL_S
from workers.commits.queue import commit_lines, commit_queue
from workers.commits.records import CommitRecords
from workers.store.connection import REDIS_ERRORS, text
from workers.store.dead_letters import expire_dead_letters
from workers.store.health import forget_health, record_health
from workers.store.scripts import CLAIM_DUE_JOBS
from workers.store.ticking import TickingThread
from workers.store.usage import USAGE_FLUSH_S, flush

log = logging.getLogger(__name__)

DUE_JOBS_TICK_S = 0.5
"""How often a worker moves due jobs (retries, rechecks, extraction checks, repairs: seconds apart)."""
HEALTH_BEAT_S = 1.0
"""How often the worker's health record and its sweep's presence are written (a process unheard
of for ``STALE_AFTER_S``, 5 s, is unhealthy; the presence lives 5 s): five commands a beat, every
tick (0.5 s) they were the most of an idle worker's Redis traffic."""
DUE_JOBS_PER_TICK = 500
"""Most jobs one tick moves (the rest go on the next)."""


def move_due_jobs(redis: redis_lib.Redis, settings: Settings, index: int = 0) -> int:
    """Enqueue the scheduled jobs of commit queue ``index`` that are due, each on its line;
    returns how many."""
    queue = commit_queue(redis, settings, index)
    due = CLAIM_DUE_JOBS(queue.connection, [queue.scheduled_job_registry.key], [int(time.time()), DUE_JOBS_PER_TICK])
    ids = [text(i) for i in due]
    if not ids:
        return 0
    jobs = [job for job in Job.fetch_many(ids, connection=queue.connection) if job is not None]
    lines = commit_lines(redis, settings, index)
    their_lines = [line_of_job(job) for job in jobs]
    new = lines.enter(set(their_lines))  # registered before the push: no worker misses one
    with queue.connection.pipeline() as pipe:
        for job, line in zip(jobs, their_lines):
            # RQ's scheduler enqueues due jobs the same way (Queue._enqueue_job).
            lines.queue(line)._enqueue_job(job, pipeline=pipe, at_front=job.should_enqueue_at_front())
        pipe.execute()
    if new:
        lines.ring()
    return len(jobs)


class DueJobMover(TickingThread):
    """Every ``DUE_JOBS_TICK_S`` until ``stop``: the worker's heartbeat, ``move_due_jobs`` (of
    each of the process's ``queues``) and,
    when due, a sweep of the in-flight commits (workers.commits.sweep) and the deployment's
    expiry of old dead letters (workers.store.dead_letters). A thread of its
    own, so the heartbeat goes on while a job runs. Redis trouble waits for the next tick."""

    def __init__(
        self, redis: redis_lib.Redis, settings: Settings, worker_name: str, queues: tuple[int, ...] = (0,)
    ) -> None:
        super().__init__(
            "ovstream-due-jobs", DUE_JOBS_TICK_S, away="due commit jobs not moved", back="due commit jobs move again"
        )
        self._redis, self._settings, self._queues = redis, settings, queues
        self.worker_name = worker_name
        """The RQ worker this thread beats for (replaced when the process starts a new one)."""
        self.more_workers: dict[int, str] = {}
        """The RQ workers of the process's other queues (workers.commits.more_queues), by queue:
        their jobs' worker is alive while this thread beats for them too."""
        self._next_sweep = self._next_usage = self._next_beat = 0.0

    def tick(self) -> None:
        if time.monotonic() >= self._next_beat:
            for name in [self.worker_name, *self.more_workers.values()]:
                commit_sweep.beat(self._redis, self._settings, name)
            with self._redis.pipeline(transaction=False) as pipe:
                record_health(pipe, self._settings, "worker", self.worker_name, queue=self._settings.commit_queue_name)
                pipe.execute()
            self._next_beat = time.monotonic() + HEALTH_BEAT_S
        for index in self._queues:
            move_due_jobs(self._redis, self._settings, index)
        if time.monotonic() >= self._next_sweep:
            commit_sweep.sweep(self._redis, self._settings)
            CommitRecords(self._redis, self._settings).announce_left()
            expire_dead_letters(self._redis, self._settings, self.worker_name)
            for index in self._queues:
                commit_lines(self._redis, self._settings, index).forget_idle()
            # twice per interval: an entry falls due at most half an interval before it is seen
            self._next_sweep = time.monotonic() + SWEEP_INTERVAL_S / 2
        if time.monotonic() >= self._next_usage:  # the usage this process's jobs counted
            flush(self._redis, self._settings)
            self._next_usage = time.monotonic() + USAGE_FLUSH_S

    def stop(self) -> None:
        super().stop()
        try:
            flush(self._redis, self._settings)
            with self._redis.pipeline(transaction=False) as pipe:
                forget_health(pipe, self._settings, self.worker_name)
                pipe.execute()
        except REDIS_ERRORS:
            pass  # the record lapses on its own
