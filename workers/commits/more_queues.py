"""``ovstream worker`` on several queue Redis (``queueRedisUrls``): which it serves, and an RQ
worker in a thread for each after the first.

RQ's worker is bound to one Redis, and only the main thread may install its signal handlers:
the first queue's worker is the process's own (SIGTERM, ``work_through_outages``); each other
queue gets an ``EmbeddedWorker`` (no signal handlers, timer timeouts) in a thread of its own,
working as that one does. Its blocking dequeue is ended by a ring of its queue's doorbell
with its lines ``closing`` (RQ's loop takes "no job" for its end). The process's due-job
thread moves due jobs of every queue it serves and beats for each of its RQ workers (a job's
worker is alive while it beats: workers.commits.sweep).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis as redis_lib

from core.backoff import Backoff
from core.config import Settings
from workers.store.connection import REDIS_ERRORS, redis_went_away

if TYPE_CHECKING:
    from workers.commits.scheduler import DueJobMover

log = logging.getLogger(__name__)

MakeWorker = Callable[..., Any]
"""``workers.commits.worker.make_worker``'s shape (an RQ worker of a queue)."""

STOP_WAIT_S = 4.0
"""How long a stopping process waits for an extra queue's worker (with the phase-2 poller's
5 s, within the 10 s a stop may take). A job it still runs then ends with the process: the
sweep takes it for lost once its worker's beat lapses and enqueues it again."""
_RETRY = Backoff(0.5, 5.0)


def served_queues(settings: Settings, asked: Sequence[int] | None) -> tuple[int, ...] | str:
    """The queues a worker serves: those ``--queue`` names (each once, in order), else every
    one; a message when one names no queue Redis."""
    count = len(settings.queue_urls)
    if not asked:
        return tuple(range(count))
    wrong = [n for n in asked if not 0 <= n < count]
    if wrong:
        return f"--queue {wrong[0]}: the deployment has {count} queue Redis (queueRedisUrls), numbered from 0"
    return tuple(dict.fromkeys(asked))


def queues_said(settings: Settings, queues: tuple[int, ...]) -> str:
    """How the log line of a starting worker names its queues ('' with one queue Redis)."""
    if len(settings.queue_urls) == 1:
        return ""
    return " of queue Redis " + ", ".join(
        f"{i} ({settings.redacted_redis_url(settings.queue_urls[i])})" for i in queues
    )


class MoreQueueWorker(threading.Thread):
    """The RQ worker of one more queue (``index``) of this process, until ``stop``; Redis away:
    a new one once it answers, as the main one does."""

    def __init__(
        self, redis: redis_lib.Redis, settings: Settings, index: int, mover: DueJobMover, make: MakeWorker
    ) -> None:
        super().__init__(name=f"ovstream-queue-{index}", daemon=True)
        self._redis, self._settings, self._index, self._mover = redis, settings, index, mover
        self._make = make
        """``workers.commits.worker.make_worker`` (that module starts these threads)."""
        self._stopping = threading.Event()
        self._worker: Any = None

    def run(self) -> None:
        failures = 0
        worker = None
        while not self._stopping.is_set():
            try:
                if worker is None:
                    worker = self._make(self._redis, self._settings, embedded=True, index=self._index)
                    self._worker, self._mover.more_workers[self._index] = worker, worker.name
                    log.info("RQ worker %s on queue Redis %d", worker.name, self._index)
                worker.work()  # until ``stop`` (or RQ's loop ends on Redis)
                failures = 0
                if not self._stopping.is_set():
                    log.warning("RQ worker of queue Redis %d quit unasked; a new one", self._index)
                    worker = None
            except Exception as exc:
                worker, failures = None, failures + 1
                if not redis_went_away(exc):
                    log.exception("RQ worker of queue Redis %d: its loop failed; a new one", self._index)
                elif failures == 1:
                    log.warning(
                        "RQ worker of queue Redis %d lost Redis (%s); a new one once it answers", self._index, exc
                    )
            self._stopping.wait(_RETRY.delay(failures))

    def stop(self) -> None:
        """End the worker after the job it runs (up to ``STOP_WAIT_S``): asked as RQ is asked,
        and woken from its blocking dequeue by its doorbell."""
        self._stopping.set()
        worker = self._worker
        if worker is not None:
            worker._stop_requested = True  # RQ's loop ends after the job it runs
            worker.lines.closing = True
            try:
                worker.lines.ring()
            except REDIS_ERRORS as exc:  # its dequeue fails on Redis as well, and the thread ends
                log.debug("queue Redis %d: no ring (%s)", self._index, exc)
        self.join(timeout=STOP_WAIT_S)
        self._mover.more_workers.pop(self._index, None)
